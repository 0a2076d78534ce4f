package padlock

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock/driver"
)

// Batch sends cmds in one go-redis pipeline per node: a round trip each.
//
// On a Cluster it does not use the Cluster client's pipeline: when a reply
// there redirects (MOVED, ASK) and another command of the same node's part
// fails, or the first one answers TRYAGAIN, go-redis queues some commands
// twice, for two nodes at once (a data race on their replies, and a script
// run twice). Batch groups the commands by master itself and sends each
// group on that master's own client, a PING first (see nodeBatch); then a
// command that a node refused without running it (see refused) goes again
// alone through the Cluster client, whose Do follows the redirect or waits
// the refusal out.
func (g *goRedis) Batch(ctx context.Context, cmds []driver.Cmd) {
	if g.cluster == nil {
		pipelined(ctx, g.rdb, cmds, nil, false)
		return
	}
	byNode := make(map[*redis.Client][]int, 1)
	var again []int
	for i := range cmds {
		node, err := g.cluster.MasterForKey(ctx, cmds[i].Key)
		if err != nil {
			again = append(again, i) // Do finds the node, or says why not
			continue
		}
		byNode[node] = append(byNode[node], i)
	}
	var wg sync.WaitGroup
	for node, idx := range byNode {
		if len(byNode) == 1 {
			pipelined(ctx, node, cmds, idx, true)
			break
		}
		wg.Go(func() { pipelined(ctx, node, cmds, idx, true) })
	}
	wg.Wait()
	for _, idx := range byNode {
		for _, i := range idx {
			if refused(cmds[i].Err) {
				again = append(again, i)
			}
		}
	}
	for _, i := range again {
		wg.Go(func() {
			cmds[i].Reply, cmds[i].Err = goRedisReply(g.cluster.Do(ctx, cmds[i].Args...))
		})
	}
	wg.Wait()
}

// pipelined sends cmds[i], for each i of idx (or every one, for a nil
// idx), in one pipeline on rdb, and sets their replies. With ping, a PING
// goes first: go-redis sends a whole pipeline again when its first reply
// is an error it retries (TRYAGAIN, LOADING, READONLY, CLUSTERDOWN), which
// would run the commands after it twice; no node answers PING so.
func pipelined(ctx context.Context, rdb redis.UniversalClient, cmds []driver.Cmd, idx []int, ping bool) {
	at := func(j int) int { return j }
	n := len(cmds)
	if idx != nil {
		at, n = func(j int) int { return idx[j] }, len(idx)
	}
	rcs := make([]*redis.Cmd, n)
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		if ping {
			p.Ping(ctx)
		}
		for j := range rcs {
			rcs[j] = p.Do(ctx, cmds[at(j)].Args...)
		}
		return nil
	})
	for j, rc := range rcs {
		if err != nil && rc.Err() == nil && rc.Val() == nil {
			rc.SetErr(err) // the pipeline never ran it: it carries no reply
		}
		cmds[at(j)].Reply, cmds[at(j)].Err = goRedisReply(rc)
	}
}

// refused reports whether a Cluster node's error err to a command says
// that the command did not run, for a reason the Cluster client's Do deals
// with: the key is elsewhere (MOVED, ASK: Do follows), its slot is being
// moved or the Cluster is down (TRYAGAIN, CLUSTERDOWN: Do tries again), the
// node is a replica now or loading (READONLY, LOADING: Do reloads its slot
// map), or go-redis closed the node's client (it dropped the node from its
// slot map). A script runs no command, and writes nothing, before Redis
// checks its keys; and padlock's scripts answer TRYAGAIN themselves before
// their first write where a migrating slot would stop them later (see
// lua/grant.lua's moving).
func refused(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, redis.ErrClosed) {
		return true
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	for _, prefix := range [...]string{"MOVED ", "ASK ", "TRYAGAIN ", "CLUSTERDOWN ", "READONLY ", "LOADING "} {
		if strings.HasPrefix(msg, prefix) {
			return true
		}
	}
	return false
}
