package padlock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock/driver"
)

// Pin returns one connection to key's primary: of the *redis.Client, or
// of the ClusterClient's master of key. It needs one of those (or a
// failover client): on other clients it fails with ErrInvalid.
func (g *goRedis) Pin(ctx context.Context, key string) (driver.Conn, error) {
	switch rdb := g.rdb.(type) {
	case *redis.Client:
		return &goRedisConn{g: g, p: &pinned{Conn: rdb.Conn()}}, nil
	case *redis.ClusterClient:
		node, err := rdb.MasterForKey(ctx, key)
		if err != nil {
			return nil, goRedisError(err)
		}
		return &goRedisConn{g: g, p: &pinned{Conn: node.Conn()}}, nil
	}
	return nil, fmt.Errorf("%w: WithReplicas needs a *redis.Client or *redis.ClusterClient, not %T", ErrInvalid, g.rdb)
}

// goRedisConn is the driver.Conn of Pin. On a Cluster, a node that answers
// MOVED or ASK ran nothing, and a bare connection does not follow: Do
// sends the command again, as go-redis does, to the node that the answer
// names (see follow), whether or not the Cluster client's slot map lists
// it; a few times at most.
type goRedisConn struct {
	g   *goRedis
	p   *pinned
	ask bool // p is to a node that imports the slot (ASK): ASKING before each script
}

// maxRedirects is how many MOVED or ASK one Do follows.
const maxRedirects = 3

func (c *goRedisConn) Do(ctx context.Context, args ...any) (any, error) {
	for try := 0; ; try++ {
		v, err := c.do(ctx, args)
		kind, addr := redirect(err)
		if kind == "" || c.g.cluster == nil || try == maxRedirects {
			return v, err
		}
		c.follow(ctx, kind, addr)
	}
}

// do sends args on c's connection: ASKING first for a script after ASK
// (it holds for one command, and a script may go as EVALSHA, then EVAL);
// WAIT with go-redis's Wait, which waits for its timeout.
func (c *goRedisConn) do(ctx context.Context, args []any) (any, error) {
	if c.ask && (isCommand(args, "evalsha") || isCommand(args, "eval")) {
		if err := c.p.Process(ctx, redis.NewStatusCmd(ctx, "asking")); err != nil {
			return nil, goRedisError(err)
		}
	}
	if isCommand(args, "wait") && len(args) == 3 {
		cmd := c.p.Wait(ctx, int(intArg(args[1])), time.Duration(intArg(args[2]))*time.Millisecond)
		return cmd.Val(), goRedisError(cmd.Err())
	}
	cmd := redis.NewCmd(ctx, args...)
	_ = c.p.Process(ctx, cmd)
	return goRedisReply(cmd)
}

// intArg is a command's argument a as a number.
func intArg(a any) int64 {
	switch a := a.(type) {
	case int:
		return int64(a)
	case int64:
		return a
	case string:
		n, _ := strconv.ParseInt(a, 10, 64)
		return n
	}
	return 0
}

func (c *goRedisConn) Close() error { return c.p.Close() }

// redirect returns "MOVED" or "ASK" and the address it names if err is a
// Cluster node's redirection, else "".
func redirect(err error) (kind, addr string) {
	e, ok := driver.Error(err)
	if !ok {
		return "", ""
	}
	kind, rest, _ := strings.Cut(string(e), " ")
	if kind != "MOVED" && kind != "ASK" {
		return "", ""
	}
	return kind, rest[strings.LastIndexByte(rest, ' ')+1:]
}

// follow moves c to the node at addr that a MOVED or ASK (kind) named.
// After ASK (a slot being migrated: the node imports it) the connection
// sends ASKING before each script. After MOVED (the slot moved: a
// failover, the end of a resharding) the slot map is fresh too, for the
// next writes (nodeConn reloads it).
func (c *goRedisConn) follow(ctx context.Context, kind, addr string) {
	_ = c.p.Close()
	c.p = c.g.nodeConn(ctx, addr)
	c.ask = kind == "ASK"
}

// A pinned is one go-redis connection to a node.
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
	return goRedisError(err)
}

// nodeConn returns a connection to the Cluster node at addr: from
// go-redis's client of it if the Cluster client's slot map (reloaded
// first, by ForEachShard) lists the node, and else from the adapter's own
// (see unlistedNodes). The caller closes it.
func (g *goRedis) nodeConn(ctx context.Context, addr string) *pinned {
	var mu sync.Mutex
	var known *redis.Client
	_ = g.cluster.ForEachShard(ctx, func(_ context.Context, n *redis.Client) error {
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
	return g.unlisted.conn(g.cluster.Options(), addr)
}

// unlistedNodes are the clients the adapter made of Cluster nodes that a
// MOVED or ASK named but no slot map listed (a master just added owns no
// slot, and is in none, while the first slot migrates to it), one per
// address. It keeps at most maxUnlisted, until the Client's Close closes
// them (see ownedCloser); past that, and after Close, a client is made
// for one connection and closed with it (see pinned).
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
