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
// timeout under 1ms is ErrInvalid. A write and its WAIT go over one
// connection to the key's primary; on a Cluster, a MOVED or ASK is
// followed, as go-redis follows it, to the node it names, also one that
// no slot map lists yet (a master just added, while the first slot
// migrates to it): the Client makes a client of such a node from the
// ClusterClient's Options (not its OnNewNode hooks), and keeps up to
// eight such until Close.
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

// A pinned is one connection to a node, for a write and the WAIT after it.
type pinned struct {
	*redis.Conn
	own *redis.Client // made for this connection alone (see unlistedNodes), or nil
}

// Close closes the connection, and its client if it was made for it.
func (p *pinned) Close() error {
	err := p.Conn.Close()
	if p.own != nil {
		_ = p.own.Close()
	}
	return err
}

// conn returns one connection to the primary of key, so that WAIT follows
// the write it is about. The caller closes it.
func (c *Client) conn(ctx context.Context, key string) (*pinned, error) {
	switch rdb := c.rdb.(type) {
	case *redis.Client:
		return &pinned{Conn: rdb.Conn()}, nil
	case *redis.ClusterClient:
		node, err := rdb.MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		return &pinned{Conn: node.Conn()}, nil
	}
	return nil, fmt.Errorf("%w: WithReplicas needs a *redis.Client or *redis.ClusterClient, not %T", ErrInvalid, c.rdb)
}

// onWriter runs write on the Client's go-redis client or, with
// WithReplicas, on one connection to l's primary, which it returns (nil
// without WithReplicas) open for the WAIT after the write, for the caller
// to close. On a Cluster, a node that answers MOVED or ASK ran nothing,
// and a bare connection does not follow: write is sent again, as go-redis
// does, to the node that the answer names (see redirected), whether or
// not the Cluster client's slot map lists it. A few times at most.
func (l *Lock) onWriter(ctx context.Context, write func(r doer) error) (*pinned, error) {
	if l.replicaCount() == 0 {
		return nil, write(l.c.rdb)
	}
	conn, err := l.c.conn(ctx, l.key)
	for try := 0; ; try++ {
		if err != nil {
			return nil, err
		}
		if err = write(connDoer{conn.Conn}); err == nil {
			return conn, nil
		}
		_ = conn.Close()
		if try == 3 {
			return nil, err
		}
		conn, err = l.c.redirected(ctx, err)
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

// redirected returns a connection to the node that err, a Cluster node's
// MOVED or ASK, names, for the caller to close; or err itself if it is
// neither or the Client is not on a Cluster. After ASK (a slot being
// migrated: the node imports it) the connection sends ASKING before each
// script. After MOVED (the slot moved: a failover, the end of a
// resharding) the slot map is fresh too, for the next writes (nodeConn
// reloads it).
func (c *Client) redirected(ctx context.Context, err error) (*pinned, error) {
	kind, addr := redirect(err)
	rdb, ok := c.rdb.(*redis.ClusterClient)
	if kind == "" || !ok {
		return nil, err
	}
	conn := c.nodeConn(ctx, rdb, addr)
	if kind == "ASK" {
		conn.AddHook(asking{})
	}
	return conn, nil
}

// nodeConn returns a connection to the Cluster node at addr: from
// go-redis's client of it if the Cluster client's slot map (reloaded
// first, by ForEachShard) lists the node, and else from the Client's own
// (see unlistedNodes). The caller closes it.
func (c *Client) nodeConn(ctx context.Context, rdb *redis.ClusterClient, addr string) *pinned {
	var mu sync.Mutex
	var known *redis.Client
	_ = rdb.ForEachShard(ctx, func(_ context.Context, n *redis.Client) error {
		if n.Options().Addr == addr {
			mu.Lock()
			known = n
			mu.Unlock()
		}
		return nil
	})
	if known != nil {
		return &pinned{Conn: known.Conn()}
	}
	return c.unlisted.conn(rdb.Options(), addr)
}

// unlistedNodes are the clients a Client made of Cluster nodes that a
// MOVED or ASK named but no slot map listed (a master just added owns no
// slot, and is in none, while the first slot migrates to it), one per
// address. It keeps at most maxUnlisted, until the Client's Close closes
// them; past that, and after Close, a client is made for one connection
// and closed with it (see pinned).
type unlistedNodes struct {
	mu     sync.Mutex
	nodes  map[string]*redis.Client
	closed bool
}

const maxUnlisted = 8

// conn returns a connection to the node at addr of the Cluster with
// options opt, for the caller to close.
func (u *unlistedNodes) conn(opt *redis.ClusterOptions, addr string) *pinned {
	u.mu.Lock()
	defer u.mu.Unlock()
	if rdb := u.nodes[addr]; rdb != nil {
		return &pinned{Conn: rdb.Conn()}
	}
	rdb := nodeClient(opt, addr)
	if u.closed || len(u.nodes) == maxUnlisted {
		return &pinned{Conn: rdb.Conn(), own: rdb}
	}
	if u.nodes == nil {
		u.nodes = map[string]*redis.Client{}
	}
	u.nodes[addr] = rdb
	return &pinned{Conn: rdb.Conn()}
}

// close closes the clients kept. A write on one of their connections at
// that moment fails.
func (u *unlistedNodes) close() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.closed = true
	for _, rdb := range u.nodes {
		_ = rdb.Close()
	}
	u.nodes = nil
}

// nodeClient returns a client of the Cluster node at addr, made as
// go-redis makes its own node clients: from the ClusterClient's options
// opt (auth, TLS, dialer, timeouts, pool), with opt.NewClient. The hooks
// that ClusterClient.OnNewNode adds to go-redis's node clients are not
// added to it.
func nodeClient(opt *redis.ClusterOptions, addr string) *redis.Client {
	o := &redis.Options{
		Addr:       addr,
		ClientName: opt.ClientName,
		Dialer:     opt.Dialer,
		OnConnect:  opt.OnConnect,

		Protocol: opt.Protocol,
		Username: opt.Username,
		Password: opt.Password,

		MaxRetries:      opt.MaxRetries,
		MinRetryBackoff: opt.MinRetryBackoff,
		MaxRetryBackoff: opt.MaxRetryBackoff,

		DialTimeout:  opt.DialTimeout,
		ReadTimeout:  opt.ReadTimeout,
		WriteTimeout: opt.WriteTimeout,

		PoolFIFO:        opt.PoolFIFO,
		PoolSize:        opt.PoolSize,
		PoolTimeout:     opt.PoolTimeout,
		MinIdleConns:    opt.MinIdleConns,
		MaxIdleConns:    opt.MaxIdleConns,
		ConnMaxIdleTime: opt.ConnMaxIdleTime,
		ConnMaxLifetime: opt.ConnMaxLifetime,

		TLSConfig: opt.TLSConfig,
	}
	if opt.NewClient != nil {
		return opt.NewClient(o)
	}
	return redis.NewClient(o)
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
func (l *Lock) replicated(ctx context.Context, conn *pinned) error {
	n, err := conn.Wait(ctx, l.replicaCount(), l.x.replicaTimeout).Result()
	switch {
	case err != nil:
		return fmt.Errorf("%w: %q: WAIT: %w", ErrNotReplicated, l.key, err)
	case n < int64(l.replicaCount()):
		return fmt.Errorf("%w: %q: %d of %d replicas acknowledged within %v", ErrNotReplicated, l.key, n, l.replicaCount(), l.x.replicaTimeout)
	}
	return nil
}
