package padlock

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock/driver"
)

// The go-redis adapter's driver.Tracker. go-redis reads no RESP3 push on
// a connection that also answers commands (not on every v9 release), so
// tracking takes two connections to the node, both RESP2: one subscribed
// to __redis__:invalidate, where Redis sends the invalidations, and one
// with CLIENT TRACKING ON REDIRECT to the first, which reads the keys.
// They are a client of their own, made from the node's Options (address,
// user, TLS, dialer), with one connection in its pool.

// trackingChannel is where Redis sends a RESP2 connection's invalidations.
const trackingChannel = "__redis__:invalidate"

// receiverID carries, in the context of the subscription's dial, where
// OnConnect writes the connection's CLIENT ID.
type receiverID struct{}

// goRedisTracking is the driver.Tracking of a go-redis client.
type goRedisTracking struct {
	rdb  *redis.Client
	ps   *redis.PubSub
	conn *redis.Conn
	done chan struct{} // closed when receive returns
	life context.Context
	end  context.CancelFunc
	once sync.Once
	mu   sync.Mutex // the reader takes one command or pipeline at a time
}

// Track opens the two connections to key's master (the client's server,
// or a failover client's primary).
func (g *goRedis) Track(ctx context.Context, key string, invalidated func([]string)) (driver.Tracking, error) {
	var opt redis.Options
	switch r := g.rdb.(type) {
	case *redis.ClusterClient:
		node, err := r.MasterForKey(ctx, key)
		if err != nil {
			return nil, goRedisError(err)
		}
		opt = *node.Options()
	case *redis.Client:
		opt = *r.Options()
	default:
		return nil, fmt.Errorf("%w: tracking on a %T", ErrUnsupported, g.rdb)
	}
	opt.Protocol, opt.PoolSize, opt.MinIdleConns = 2, 1, 0
	opt.ContextTimeoutEnabled = true // the watch bounds each round trip
	connect := opt.OnConnect
	opt.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		if connect != nil {
			if err := connect(ctx, cn); err != nil {
				return err
			}
		}
		if id, ok := ctx.Value(receiverID{}).(*int64); ok {
			n, err := cn.ClientID(ctx).Result()
			if err != nil {
				return err
			}
			*id = n
		}
		return nil
	}
	t := &goRedisTracking{rdb: redis.NewClient(&opt), done: make(chan struct{})}
	var id int64
	t.ps = t.rdb.Subscribe(ctx)
	if err := t.open(context.WithValue(ctx, receiverID{}, &id), &id); err != nil {
		t.Close()
		return nil, err
	}
	t.life, t.end = context.WithCancel(context.Background())
	go t.receive(invalidated)
	return t, nil
}

// open subscribes the receiver (its dial's ctx carries id, see
// receiverID), and turns tracking on for the reader.
func (t *goRedisTracking) open(ctx context.Context, id *int64) error {
	if err := t.ps.Subscribe(ctx, trackingChannel); err != nil {
		return goRedisError(err)
	}
	if _, err := t.ps.ReceiveTimeout(ctx, until(ctx)); err != nil { // the confirmation
		return goRedisError(err)
	}
	if *id == 0 {
		return fmt.Errorf("padlock: the tracking receiver's CLIENT ID is unknown")
	}
	t.conn = t.rdb.Conn()
	on := redis.NewCmd(ctx, "client", "tracking", "on", "redirect", *id)
	_ = t.conn.Process(ctx, on)
	return goRedisError(on.Err())
}

// receive reads the invalidations until the receiver fails or is closed.
// A silent receiver is pinged, and taken for lost when the PING goes
// unanswered as long again: go-redis would dial it again by itself, with
// another CLIENT ID, which the redirect does not follow. The reader is
// pinged with it: Redis stops tracking for a reader whose connection it
// lost, and the receiver would hear nothing.
func (t *goRedisTracking) receive(invalidated func([]string)) {
	defer close(t.done)
	pinged := false
	for {
		msg, err := t.ps.ReceiveTimeout(t.life, pubsubQuiet)
		switch {
		case err == nil:
		case strings.Contains(err.Error(), "unsupported pubsub message payload"):
			invalidated(nil) // FLUSHALL's nil list, which go-redis does not read
			continue
		case driver.IsTimeout(err) && !pinged && t.ps.Ping(t.life) == nil && t.pingReader() == nil:
			pinged = true
			continue
		default:
			return
		}
		pinged = false
		if m, ok := msg.(*redis.Message); ok && m.Channel == trackingChannel {
			switch {
			case m.PayloadSlice != nil:
				invalidated(m.PayloadSlice)
			case m.Payload != "":
				invalidated([]string{m.Payload})
			default:
				invalidated(nil)
			}
		}
	}
}

// pingReader pings the reader, bounded by pubsubQuiet.
func (t *goRedisTracking) pingReader() error {
	ctx, cancel := context.WithTimeout(t.life, pubsubQuiet)
	defer cancel()
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.conn.Ping(ctx).Err()
}

// Batch sends cmds on the reader, in one round trip.
func (t *goRedisTracking) Batch(ctx context.Context, cmds []driver.Cmd) {
	t.mu.Lock()
	defer t.mu.Unlock()
	rcs := make([]*redis.Cmd, len(cmds))
	_, err := t.conn.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range cmds {
			rcs[i] = p.Do(ctx, cmds[i].Args...)
		}
		return nil
	})
	for i, rc := range rcs {
		if err != nil && rc.Err() == nil && rc.Val() == nil {
			rc.SetErr(err)
		}
		cmds[i].Reply, cmds[i].Err = goRedisReply(rc)
	}
}

func (t *goRedisTracking) Done() <-chan struct{} { return t.done }

// Close closes both connections and their client.
func (t *goRedisTracking) Close() {
	t.once.Do(func() {
		if t.end != nil {
			t.end()
		}
		_ = t.ps.Close()
		if t.conn != nil {
			_ = t.conn.Close()
		}
		_ = t.rdb.Close()
		if t.end != nil {
			<-t.done
		} else {
			close(t.done)
		}
	})
}
