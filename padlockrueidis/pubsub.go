package padlockrueidis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/padlock-go/padlock/driver"
	"github.com/redis/rueidis"
)

// errNothing is what Receive returns when nothing came in time: a
// timeout (driver.IsTimeout), after which the connection is as good as
// before.
var errNothing = fmt.Errorf("padlockrueidis: nothing received: %w", context.DeadlineExceeded)

// errPubSubClosed is what Receive returns once the PubSub is closed.
var errPubSubClosed = errors.New("padlockrueidis: pub/sub connection closed")

// A lostError is the end of a pub/sub connection: never a timeout, even
// when what ended it was one (rueidis closes a connection that stopped
// answering), since padlock takes a timeout for a connection as good as
// before.
type lostError struct{ err error }

func (e lostError) Error() string { return "padlockrueidis: pub/sub connection lost: " + e.err.Error() }
func (e lostError) Timeout() bool { return false }
func (e lostError) Unwrap() error {
	if errors.Is(e.err, context.DeadlineExceeded) {
		return nil
	}
	return e.err
}

// pubsub is a driver.PubSub on a connection of rueidis's own (a conn):
// rueidis calls its hooks with what the connection delivers, and they
// queue it for Receive.
type pubsub struct {
	d      *rueidisDriver
	c      *conn           // its dc is the connection
	key    string          // the slot of every command, for a Cluster's dedicated client takes one slot
	life   context.Context // ends at Close: the PINGs in flight end with it
	end    context.CancelFunc
	pings  sync.WaitGroup
	closed sync.Once

	mu      sync.Mutex
	sharded bool  // it sent SSUBSCRIBE
	queue   []any // *driver.Message, *driver.Subscription, *driver.Pong or an error
	ready   chan struct{}
	gone    error // the connection's end, once known
}

// PubSub opens a connection of its own to the node that owns key (on a
// Cluster, key "" is the master of slot 0) and PINGs it. Key "" on a
// client of one node (padlock's notifier) shares the connection with
// tracking (see conn): it may deliver messages of channels that an
// earlier PubSub on it subscribed, should their unsubscribe have failed.
func (d *rueidisDriver) PubSub(ctx context.Context, key string) (driver.PubSub, error) {
	if err := d.gate.pass(ctx, d); err != nil {
		return nil, err
	}
	p := &pubsub{d: d, key: key, ready: make(chan struct{}, 1)}
	p.life, p.end = context.WithCancel(context.Background())
	p.c = d.dedicate(key == "", func(c *conn) bool { return c.join(p) })
	// The PING takes the connection (a Cluster's dedicated client connects
	// on its first command, to the node of that command's slot).
	if err := p.c.dc.Do(ctx, p.slotted(p.c.dc.B().Ping().Build())).Error(); err != nil {
		_ = p.Close()
		return nil, d.classify(err)
	}
	return p, nil
}

func (p *pubsub) slotted(c rueidis.Completed) rueidis.Completed {
	if p.key == "" && p.d.kind != driver.Cluster {
		return c
	}
	return c.SetSlot(p.key)
}

func (p *pubsub) message(m rueidis.PubSubMessage) {
	p.push(&driver.Message{Channel: m.Channel, Payload: m.Message})
}

func (p *pubsub) subscription(s rueidis.PubSubSubscription) {
	if s.Kind == "subscribe" || s.Kind == "ssubscribe" {
		p.push(&driver.Subscription{Channel: s.Channel})
	}
}

func (p *pubsub) push(v any) {
	p.mu.Lock()
	p.queue = append(p.queue, v)
	p.mu.Unlock()
	select {
	case p.ready <- struct{}{}:
	default:
	}
}

// Subscribe sends SUBSCRIBE, or one SSUBSCRIBE per channel (rueidis's
// builder refuses channels of several slots in one), in one round trip,
// and returns the first error reply (such as "unknown command" from a
// server without sharded pub/sub).
func (p *pubsub) Subscribe(ctx context.Context, sharded bool, channels ...string) error {
	if len(channels) == 0 {
		return nil
	}
	var cmds []rueidis.Completed
	if sharded {
		p.mu.Lock()
		p.sharded = true
		p.mu.Unlock()
		for _, ch := range channels {
			cmds = append(cmds, p.slotted(p.c.dc.B().Ssubscribe().Channel(ch).Build()))
		}
	} else {
		cmds = append(cmds, p.slotted(p.c.dc.B().Subscribe().Channel(channels...).Build()))
	}
	for _, r := range p.c.dc.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			return p.d.classify(err)
		}
	}
	return nil
}

// Unsubscribe sends UNSUBSCRIBE, or one SUNSUBSCRIBE per channel, in one
// round trip, and returns once rueidis has the confirmations (what came
// before them stays queued for Receive), or the first error reply. It
// makes pubsub a driver.Unsubscriber, for padlock.Check's probe.
func (p *pubsub) Unsubscribe(ctx context.Context, sharded bool, channels ...string) error {
	if len(channels) == 0 {
		return nil
	}
	var cmds []rueidis.Completed
	if sharded {
		for _, ch := range channels {
			cmds = append(cmds, p.slotted(p.c.dc.B().Sunsubscribe().Channel(ch).Build()))
		}
	} else {
		cmds = append(cmds, p.slotted(p.c.dc.B().Unsubscribe().Channel(channels...).Build()))
	}
	for _, r := range p.c.dc.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			return p.d.classify(err)
		}
	}
	return nil
}

// Receive returns what came first: a queued message, confirmation or
// PONG, the connection's end, ctx's end, or errNothing after timeout.
func (p *pubsub) Receive(ctx context.Context, timeout time.Duration) (any, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		if v, ok := p.next(); ok {
			if err, isErr := v.(error); isErr {
				return nil, err
			}
			return v, nil
		}
		select {
		case <-p.ready:
		case <-p.c.gone:
			p.lose(p.c.err)
		case <-p.life.Done():
			return nil, errPubSubClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer.C:
			return nil, errNothing
		}
	}
}

// next takes the first of the queue, or, once it is empty, the
// connection's end.
func (p *pubsub) next() (any, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.queue) > 0 {
		v := p.queue[0]
		p.queue[0] = nil
		p.queue = p.queue[1:]
		return v, true
	}
	if p.gone != nil {
		return p.gone, true
	}
	return nil, false
}

// lose records the connection's end.
func (p *pubsub) lose(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone == nil {
		p.gone = lostError{p.d.classify(err)}
	}
}

// Ping sends PING from a goroutine of its own, whose answer is queued as a
// *driver.Pong, or, if it fails, the connection's end: rueidis answers
// PING after the messages the connection received before.
func (p *pubsub) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.life.Err() != nil {
		return errPubSubClosed
	}
	p.pings.Go(func() {
		err := p.c.dc.Do(p.life, p.slotted(p.c.dc.B().Ping().Build())).Error()
		switch {
		case err == nil:
			p.push(&driver.Pong{})
		case p.life.Err() == nil:
			p.push(lostError{p.d.classify(err)})
		}
	})
	return nil
}

// Close leaves the connection, which is closed unless tracking rides it
// (then its channels are unsubscribed, within a second: see conn), and
// waits for the PINGs in flight.
func (p *pubsub) Close() error {
	p.closed.Do(func() {
		p.end()
		p.mu.Lock()
		sharded := p.sharded
		p.mu.Unlock()
		p.c.leave(sharded)
		p.pings.Wait()
	})
	return nil
}
