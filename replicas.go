package padlock

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// WithReplicas makes every acquire and extend of the lock wait, with WAIT,
// until at least n replicas of the key's primary have it, for up to
// timeout. If fewer acknowledge in time, the lock is released and the call
// fails with an error matching ErrNotReplicated. It narrows the window in
// which a failover loses a lock (replication is still asynchronous: a
// replica that acknowledged can still lag behind a later write).
// KeepAlive's renewals wait too; a renewal that misses its replicas counts
// as a failed renewal (retried until the lock's local deadline).
//
// It needs a *redis.Client (or failover client) or a *redis.ClusterClient;
// on other clients the calls fail with ErrInvalid. n < 1 turns it off;
// timeout under 1ms is ErrInvalid.
func WithReplicas(n int, timeout time.Duration) Option {
	return optionFunc(func(o *options) {
		o.replicas, o.replicaTimeout = n, timeout
	})
}

// checkReplicas validates the WithReplicas settings.
func (o options) checkReplicas() error {
	if o.replicas > 0 && o.replicaTimeout < time.Millisecond {
		return fmt.Errorf("%w: WithReplicas timeout %v is under 1ms", ErrInvalid, o.replicaTimeout)
	}
	return nil
}

// conn returns one connection to the primary of key, so that WAIT follows
// the write it is about. The caller closes it.
func (c *Client) conn(ctx context.Context, key string) (*redis.Conn, error) {
	switch rdb := c.rdb.(type) {
	case *redis.Client:
		return rdb.Conn(), nil
	case *redis.ClusterClient:
		node, err := rdb.MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		return node.Conn(), nil
	}
	return nil, fmt.Errorf("%w: WithReplicas needs a *redis.Client or *redis.ClusterClient, not %T", ErrInvalid, c.rdb)
}

// writer returns what a write of l goes through: the client; or, with
// WithReplicas, one connection to the key's primary (conn, for the caller
// to close), so that the WAIT after the write follows it.
func (l *Lock) writer(ctx context.Context) (r doer, conn *redis.Conn, err error) {
	if l.replicaCount() == 0 {
		return l.c.rdb, nil, nil
	}
	if conn, err = l.c.conn(ctx, l.key); err != nil {
		return nil, nil, err
	}
	return connDoer{conn}, conn, nil
}

// onWriter runs write on l's writer and returns the connection it ran on
// (nil without WithReplicas), open for the WAIT after it, for the caller
// to close. On a Cluster, a node that answers MOVED or ASK ran nothing,
// and a bare connection does not follow: after MOVED (the slot moved: a
// failover, the end of a resharding) the Client's slot map is reloaded and
// write is sent again to the key's master now; after ASK (a slot being
// migrated) it is sent to the node that asks, after ASKING. A few times at
// most.
func (l *Lock) onWriter(ctx context.Context, write func(r doer) error) (*redis.Conn, error) {
	ask := "" // the node that asked for the next try (ASK)
	for try := 0; ; try++ {
		var r doer
		var conn *redis.Conn
		var err error
		if ask != "" {
			conn, err = l.c.askConn(ctx, ask)
			r = connDoer{conn}
		} else {
			r, conn, err = l.writer(ctx)
		}
		if err != nil {
			return nil, err
		}
		err = write(r)
		if err == nil {
			return conn, nil
		}
		if conn != nil {
			_ = conn.Close()
		}
		kind, to := redirect(err)
		if kind == "" || try == 3 {
			return nil, err
		}
		ask = ""
		if kind == "ASK" {
			ask = to
		} else if err := l.c.followSlot(ctx, l.key, to, err); err != nil {
			return nil, err
		}
	}
}

// redirect returns "MOVED" or "ASK" and the address it names if err is a
// Cluster node's redirection, else "".
func redirect(err error) (kind, addr string) {
	if !isRedisError(err) {
		return "", ""
	}
	kind, rest, _ := strings.Cut(err.Error(), " ")
	if kind != "MOVED" && kind != "ASK" {
		return "", ""
	}
	return kind, rest[strings.LastIndexByte(rest, ' ')+1:]
}

// followSlot reloads the Client's Cluster slot map until key's master in
// it is no longer the one that answered moved (for addr), for up to 2s or
// until ctx ends (go-redis reloads it in the background, at most every
// 200ms).
func (c *Client) followSlot(ctx context.Context, key, addr string, moved error) error {
	rdb, ok := c.rdb.(*redis.ClusterClient)
	if !ok {
		return moved
	}
	node, err := rdb.MasterForKey(ctx, key)
	if err != nil {
		return err
	}
	was := node.Options().Addr
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for {
		rdb.ReloadState(ctx)
		if node, err := rdb.MasterForKey(ctx, key); err == nil && (node.Options().Addr == addr || node.Options().Addr != was) {
			return nil
		}
		if sleep(ctx, 20*time.Millisecond) != nil {
			return fmt.Errorf("the Cluster's slot map still names %s as %q's master: %w", was, key, moved)
		}
	}
}

// askConn returns a connection to the Cluster master at addr that takes
// scripts for a slot it is importing (see asking), for the caller to close.
func (c *Client) askConn(ctx context.Context, addr string) (*redis.Conn, error) {
	rdb, ok := c.rdb.(*redis.ClusterClient)
	if !ok {
		return nil, fmt.Errorf("ASK to %s on a %T", addr, c.rdb)
	}
	var mu sync.Mutex
	var target *redis.Client
	_ = rdb.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
		if m.Options().Addr == addr {
			mu.Lock()
			target = m
			mu.Unlock()
		}
		return nil
	})
	if target == nil {
		return nil, fmt.Errorf("ASK to %s: not a master the Cluster client knows", addr)
	}
	conn := target.Conn()
	conn.AddHook(asking{})
	return conn, nil
}

// asking is a hook of a connection to a node that imports a slot: ASKING
// before each script (it holds for one command, and a script may go as
// EVALSHA, then EVAL).
type asking struct{}

func (asking) DialHook(next redis.DialHook) redis.DialHook { return next }

func (asking) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (asking) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			if err := next(ctx, redis.NewStatusCmd(ctx, "asking")); err != nil {
				return err
			}
		}
		return next(ctx, cmd)
	}
}

// connDoer sends padlock's commands over one connection. (*redis.Conn has
// no Do method before go-redis v9.8.)
type connDoer struct{ *redis.Conn }

func (c connDoer) Do(ctx context.Context, args ...any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	_ = c.Process(ctx, cmd)
	return cmd
}

// replicated waits for l's replicas after a write on conn. On failure the
// error says how many acknowledged.
func (l *Lock) replicated(ctx context.Context, conn *redis.Conn) error {
	n, err := conn.Wait(ctx, l.replicaCount(), l.x.replicaTimeout).Result()
	switch {
	case err != nil:
		return fmt.Errorf("%w: %q: WAIT: %w", ErrNotReplicated, l.key, err)
	case n < int64(l.replicaCount()):
		return fmt.Errorf("%w: %q: %d of %d replicas acknowledged within %v", ErrNotReplicated, l.key, n, l.replicaCount(), l.x.replicaTimeout)
	}
	return nil
}
