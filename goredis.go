package padlock

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock/driver"
)

// The go-redis adapter: New's driver.Driver over a redis.UniversalClient.
// Its files (goredis*.go) and the tests are the only files of the package
// that import go-redis; the rest speaks through package driver. Commands
// go where go-redis routes them, but SCRIPT LOAD, which go-redis sends to
// any node: it goes to the master of its key.

// New returns a Client that takes locks through rdb: a *redis.Client, a
// *redis.ClusterClient or a failover client. The options set the Client's
// defaults; options passed to a single call override them.
//
// New does not contact Redis and starts no goroutine. A nil rdb is not a
// panic: every call on the returned Client fails with ErrInvalid. A
// *redis.Ring is refused the same way, with ErrUnsupported: a Ring routes
// a script by its first key and moves keys to another shard when one fails
// a health check, so a lock could be held on two shards at once. Use a
// Cluster, or NewRedlock over the shards.
func New(rdb redis.UniversalClient, opts ...Option) *Client {
	switch {
	case isNil(rdb):
		return refusing(errNilRedis, opts)
	case isRing(rdb):
		return refusing(errRing, opts)
	}
	return NewDriver(newGoRedis(rdb), opts...)
}

// NewRedlock returns a Client whose locks live on several independent Redis
// primaries at once (the Redlock algorithm): a lock is taken when a quorum
// of them, len(clients)/2 + 1, take it within its validity, the ttl minus
// the time the attempt took minus a drift of 1% of the ttl + 2ms. Attempts
// go to every node in parallel; an attempt that misses its quorum or its
// validity is undone on every node. Release, Extend, TTL and KeepAlive act
// on every node and succeed on a quorum; waiters are woken by a release
// on any node.
//
// The Client has the API of New's. WithFencing is refused with ErrInvalid:
// independent primaries keep independent counters, and no number handed
// out by a quorum of them is guaranteed to be higher than one handed out
// before (the nodes of two quorums can differ). WithReplicas is refused
// too. Inspect reads the first node. Redlock survives the loss of a
// minority of nodes; it does not make a lock safe against a paused holder.
//
// A nil client, or no clients, makes every call fail with ErrInvalid. New
// starts no goroutine; neither does NewRedlock.
func NewRedlock(clients []redis.UniversalClient, opts ...Option) *Client {
	if err := nilIn("NewRedlock", "go-redis client", clients); err != nil {
		return refusing(err, opts)
	}
	if slices.ContainsFunc(clients, isRing) {
		return refusing(errRing, opts)
	}
	ds := make([]driver.Driver, len(clients))
	for i, rdb := range clients {
		ds[i] = newGoRedis(rdb)
	}
	return NewDriverRedlock(ds, opts...)
}

// errRing is what every call on a Client over a *redis.Ring returns.
var errRing = fmt.Errorf("%w: a *redis.Ring moves keys between shards (a shard that fails a health check hands its keys to another, and a script runs on its first key's shard), so a lock could be held twice; use a *redis.ClusterClient, or NewRedlock over the shards", ErrUnsupported)

func isRing(rdb redis.UniversalClient) bool {
	_, ok := rdb.(*redis.Ring)
	return ok
}

// isNil reports whether v is nil, or a nil pointer in an interface.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	r := reflect.ValueOf(v)
	return r.Kind() == reflect.Pointer && r.IsNil()
}

// goRedis is the driver.Driver of a go-redis client.
type goRedis struct {
	rdb      redis.UniversalClient
	cluster  *redis.ClusterClient // rdb, if it is one
	kind     driver.Kind
	unlisted unlistedNodes // clients of Cluster nodes no slot map lists (see Pin); closed by closeOwned
}

func newGoRedis(rdb redis.UniversalClient) *goRedis {
	g := &goRedis{rdb: rdb, kind: driver.Single}
	switch r := rdb.(type) {
	case *redis.ClusterClient:
		g.cluster, g.kind = r, driver.Cluster
	case *redis.Client:
		if isFailover(r) {
			g.kind = driver.Sentinel
		}
	}
	return g
}

// isFailover reports whether rdb is a Sentinel failover client (go-redis
// names its address so).
func isFailover(rdb *redis.Client) bool { return rdb.Options().Addr == "FailoverClient" }

// Kind is Cluster for a *redis.ClusterClient, Sentinel for a failover
// client, and Single for any other.
func (g *goRedis) Kind() driver.Kind { return g.kind }

// Do sends args through go-redis, which routes them; SCRIPT LOAD goes to
// key's master.
func (g *goRedis) Do(ctx context.Context, key string, args ...any) (any, error) {
	if g.cluster != nil && key != "" && isCommand(args, "script") {
		node, err := g.cluster.MasterForKey(ctx, key)
		if err != nil {
			return nil, goRedisError(err)
		}
		return goRedisReply(node.Do(ctx, args...))
	}
	return goRedisReply(g.rdb.Do(ctx, args...))
}

// isCommand reports whether args are a command called name.
func isCommand(args []any, name string) bool {
	s, ok := args[0].(string)
	return ok && strings.EqualFold(s, name)
}

// Route names the master that owns key on a Cluster (from the client's
// slot map), or "" on any other client, or when the map does not say.
func (g *goRedis) Route(ctx context.Context, key string) string {
	if g.cluster == nil {
		return ""
	}
	node, err := g.cluster.MasterForKey(ctx, key)
	if err != nil {
		return ""
	}
	return node.Options().Addr
}

// Nodes returns the client itself, or each master of a Cluster (from its
// slot map, reloaded if need be).
func (g *goRedis) Nodes(ctx context.Context) ([]driver.Node, error) {
	switch r := g.rdb.(type) {
	case *redis.Client:
		return []driver.Node{goRedisNode(r)}, nil
	case *redis.ClusterClient:
		var mu sync.Mutex
		var out []driver.Node
		err := r.ForEachMaster(ctx, func(_ context.Context, n *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			out = append(out, goRedisNode(n))
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("the Cluster's masters: %w", goRedisError(err))
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: Check on a %T", ErrUnsupported, g.rdb)
}

// goRedisNode is the Node of one server's client. A failover client's
// Addr is "FailoverClient" (Check asks the server where it is).
func goRedisNode(rdb *redis.Client) driver.Node {
	return driver.Node{Addr: rdb.Options().Addr, Driver: &goRedis{rdb: rdb, kind: driver.Single}}
}

// Protocol is 2 for a *redis.Client set to RESP2, else 3 (go-redis's
// default, and what it asks a Cluster's nodes for).
func (g *goRedis) Protocol() int {
	if r, ok := g.rdb.(*redis.Client); ok && r.Options().Protocol == 2 {
		return 2
	}
	return 3
}

// An ownedCloser is a Driver that made clients for a Client alone (the
// go-redis adapter's clients of Cluster nodes no slot map lists, see Pin):
// the Client's Close closes them.
type ownedCloser interface {
	closeOwned()
}

func (g *goRedis) closeOwned() { g.unlisted.close() }

// goRedisReply is cmd's reply and error as package driver has them.
func goRedisReply(cmd *redis.Cmd) (any, error) {
	if err := cmd.Err(); err != nil {
		return nil, goRedisError(err)
	}
	return plainReply(cmd.Val()), nil
}

// plainReply is v with go-redis's RESP3 maps as map[string]any and the
// error replies in an array as errors that driver.Error finds. Arrays are
// changed in place: a reply belongs to its caller.
func plainReply(v any) any {
	switch v := v.(type) {
	case []any:
		for i, e := range v {
			v[i] = plainReply(e)
		}
		return v
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[fmt.Sprint(k)] = plainReply(e)
		}
		return m
	case redis.Error:
		return goRedisError(v)
	}
	return v
}

// goRedisError is err as package driver has it: redis.Nil is driver.ErrNil,
// an error reply a driver.ServerError, a closed client's error wraps
// driver.ErrClosed; each still wraps go-redis's error, for errors.As.
func goRedisError(err error) error {
	switch {
	case err == nil:
		return nil
	case err == redis.Nil:
		return driver.ErrNil
	case errors.Is(err, redis.ErrClosed):
		return wrapped{err, driver.ErrClosed}
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return wrapped{err, driver.ServerError(rerr.Error())}
	}
	return err
}

// wrapped is go-redis's error err, as package driver has it: as.
type wrapped struct {
	err error
	as  error
}

func (e wrapped) Error() string   { return e.err.Error() }
func (e wrapped) Unwrap() []error { return []error{e.as, e.err} }
