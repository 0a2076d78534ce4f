package padlock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock/driver"
)

// The go-redis adapter's driver.Tracker: one connection of padlock's own
// to the node, in RESP3 (HELLO 3) with CLIENT TRACKING on, on which Redis
// pushes the invalidations between the replies. go-redis reads no push on
// a connection that answers commands (not on every v9 release padlock
// supports), so padlock reads this one itself (readRESP3). It is dialed
// as go-redis dials the node: the node's Options give the Dialer (the
// address, TLS), the user and password (or CredentialsProvider) and the
// database. A Sentinel failover client polls instead (see Track).

// goRedisTracking is the driver.Tracking of a go-redis client.
type goRedisTracking struct {
	conn    net.Conn
	mu      sync.Mutex // one Batch at a time: its commands, then its replies
	w       *bufio.Writer
	replies chan resp3Reply // from read, in order
	heard   atomic.Int64    // when read last heard anything (unix ns)
	done    chan struct{}   // closed when read returns
	closing chan struct{}
	once    sync.Once
}

// A resp3Reply is a reply read on the connection.
type resp3Reply struct{ v any }

// Track dials key's master (the client's server, or a Cluster's master
// of key) and turns tracking on; a Sentinel failover client is refused.
func (g *goRedis) Track(ctx context.Context, key string, invalidated func([]string)) (driver.Tracking, error) {
	var opt *redis.Options
	switch r := g.rdb.(type) {
	case *redis.ClusterClient:
		node, err := r.MasterForKey(ctx, key)
		if err != nil {
			return nil, goRedisError(err)
		}
		opt = node.Options()
	case *redis.Client:
		opt = r.Options()
		if g.kind == driver.Sentinel {
			// Its Dialer asks the Sentinels for the primary, and may set up
			// go-redis's watch of them anew, which a dial after the client's
			// Close leaks (go-redis v9.0.5): such a Client polls.
			return nil, fmt.Errorf("%w: tracking on a Sentinel failover client", ErrUnsupported)
		}
	default:
		return nil, fmt.Errorf("%w: tracking on a %T", ErrUnsupported, g.rdb)
	}
	conn, err := opt.Dialer(ctx, opt.Network, opt.Addr)
	if err != nil {
		return nil, err
	}
	t := &goRedisTracking{conn: conn, w: bufio.NewWriter(conn), replies: make(chan resp3Reply, 16),
		done: make(chan struct{}), closing: make(chan struct{})}
	t.heard.Store(time.Now().UnixNano())
	go t.read(invalidated)
	if err := t.open(ctx, opt); err != nil {
		t.Close()
		return nil, err
	}
	go t.keepAlive()
	return t, nil
}

// open says HELLO 3 (with the credentials), selects the database and
// turns tracking on.
func (t *goRedisTracking) open(ctx context.Context, opt *redis.Options) error {
	hello := []any{"hello", "3"}
	user, pass := opt.Username, opt.Password
	if opt.CredentialsProvider != nil {
		user, pass = opt.CredentialsProvider()
	}
	if pass != "" {
		if user == "" {
			user = "default"
		}
		hello = append(hello, "auth", user, pass)
	}
	cmds := []driver.Cmd{{Args: hello}}
	if opt.DB != 0 {
		cmds = append(cmds, driver.Cmd{Args: []any{"select", opt.DB}})
	}
	cmds = append(cmds, driver.Cmd{Args: []any{"client", "tracking", "on"}})
	t.Batch(ctx, cmds)
	for _, c := range cmds {
		if c.Err != nil {
			return c.Err
		}
	}
	return nil
}

// read reads the connection until it fails or is closed: an invalidation
// goes to invalidated, a reply to Batch.
func (t *goRedisTracking) read(invalidated func([]string)) {
	defer close(t.done)
	r := bufio.NewReader(t.conn)
	for {
		v, push, err := readRESP3(r)
		if err != nil {
			return
		}
		t.heard.Store(time.Now().UnixNano())
		if push {
			if keys, ok := invalidation(v); ok {
				invalidated(keys)
			}
			continue
		}
		select {
		case t.replies <- resp3Reply{v: v}:
		case <-t.closing:
			return
		}
	}
}

// invalidation returns the keys of a push that is an invalidation (nil:
// every key, a FLUSHALL).
func invalidation(v any) ([]string, bool) {
	p, ok := v.([]any)
	if !ok || len(p) != 2 || p[0] != "invalidate" {
		return nil, false
	}
	ks, _ := p[1].([]any)
	keys := make([]string, 0, len(ks))
	for _, k := range ks {
		if s, ok := k.(string); ok {
			keys = append(keys, s)
		}
	}
	if ks == nil {
		keys = nil
	}
	return keys, true
}

// keepAlive pings the connection after pubsubQuiet of silence, and takes
// it for lost when the PING goes unanswered as long again.
func (t *goRedisTracking) keepAlive() {
	tick := time.NewTicker(pubsubQuiet)
	defer tick.Stop()
	for {
		select {
		case <-t.done:
			return
		case <-tick.C:
		}
		if time.Since(time.Unix(0, t.heard.Load())) < pubsubQuiet {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), pubsubQuiet)
		ping := []driver.Cmd{{Args: []any{"ping"}}}
		t.Batch(ctx, ping)
		cancel()
		if ping[0].Err != nil {
			t.Close()
			return
		}
	}
}

// Batch sends cmds and reads their replies, in one round trip. A Batch
// that fails or whose ctx ends closes the connection: replies would come
// out of turn.
func (t *goRedisTracking) Batch(ctx context.Context, cmds []driver.Cmd) {
	t.mu.Lock()
	defer t.mu.Unlock()
	err := t.send(cmds)
	for i := range cmds {
		if err == nil {
			var r resp3Reply
			select {
			case r = <-t.replies:
			case <-t.done:
				err = errors.New("padlock: the tracking connection is closed")
			case <-ctx.Done():
				err = ctx.Err()
			}
			if err == nil {
				cmds[i].Reply, cmds[i].Err = r.v, nil
				if e, ok := r.v.(driver.ServerError); ok {
					cmds[i].Reply, cmds[i].Err = nil, e
				}
				continue
			}
			t.Close()
		}
		cmds[i].Reply, cmds[i].Err = nil, err
	}
}

// send writes cmds, each an array of bulk strings.
func (t *goRedisTracking) send(cmds []driver.Cmd) error {
	for _, c := range cmds {
		fmt.Fprintf(t.w, "*%d\r\n", len(c.Args))
		for _, a := range c.Args {
			var s string
			switch a := a.(type) {
			case string:
				s = a
			case int:
				s = strconv.Itoa(a)
			case int64:
				s = strconv.FormatInt(a, 10)
			default:
				s = fmt.Sprint(a)
			}
			fmt.Fprintf(t.w, "$%d\r\n%s\r\n", len(s), s)
		}
	}
	return t.w.Flush()
}

func (t *goRedisTracking) Done() <-chan struct{} { return t.done }

// Close closes the connection, and waits for its reader.
func (t *goRedisTracking) Close() {
	t.once.Do(func() {
		close(t.closing)
		_ = t.conn.Close()
	})
	<-t.done
}
