package padlock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/padlock-go/padlock/driver"
)

// Notifications.
//
// A Client subscribes, while it has waiters for a key, to the key's
// channel: on the one way to wait (see wait.go) its own channel for the
// key, on which grants to its waiters are announced ("<token> <fence>");
// on the attempt path (Redlock, keys with a brace but no hash tag), the
// key's own channel, on which releases are announced ("released"), which
// wakes the first of its waiters for the key to attempt. SPUBLISH where
// the server has sharded pub/sub, so that only the key's shard hears it;
// PUBLISH otherwise.

// releasedMsg is the payload of a release notification.
const releasedMsg = "released"

// subscribeTimeout bounds how long a waiter waits for its subscription to
// be confirmed before it relies on its timer alone.
const subscribeTimeout = time.Second

// subscriberLinger is how long a pub/sub connection stays open once no
// key uses it.
const subscriberLinger = 200 * time.Millisecond

// pubsubQuiet is how long a pub/sub connection may be silent before its
// reader sends a PING. One that does not answer within as long again is
// taken for dead (half-open: a NAT or a peer that forgot it says nothing)
// and replaced by a new one; until then a grant to this Client's waiters
// waits for their tickets' renewals.
const pubsubQuiet = 5 * time.Second

// A subscriber is one pub/sub connection and the goroutine reading it.
type subscriber struct {
	node    driver.Driver
	sharded bool
	probe   bool          // a Sentinel's: checks that it listens on the primary (see heard)
	done    chan struct{} // closed when the goroutine has exited
	idle    *time.Timer   // while no key uses it: closes it; under the notifier's mu

	mu     sync.Mutex
	ps     driver.PubSub       // replaced when it is found dead (see pubsubQuiet, read)
	gen    int                 // how many times ps was replaced
	chans  map[string]struct{} // every channel subscribed on it
	sure   map[string]struct{} // those the server confirmed on ps (see heard)
	closed bool
}

// subscribe makes sure key's channel is subscribed, and for a new
// connection waits (up to subscribeTimeout, or ctx) for Redis to confirm
// it. It reports whether this call subscribed the channel; on failure the
// waiters rely on their timers alone.
func (c *Client) subscribe(ctx context.Context, key string) bool {
	n := &c.notify
	n.mu.Lock()
	q := n.queues[key]
	if n.closed || q == nil || q.subscribed {
		n.mu.Unlock()
		return false // someone else subscribed it
	}
	q.subscribed = true
	n.mu.Unlock()

	nodes := c.pubsubNodes()
	ok := false
	for i, node := range nodes {
		if c.subscribeOn(ctx, groupOn(i), node, c.kinds[i], key, q) == nil {
			ok = true
		}
	}
	if !ok {
		n.mu.Lock()
		q.subscribed = false
		n.mu.Unlock()
	}
	return ok
}

// pubsubNodes are the servers whose releases a waiter listens to: every
// node of a Redlock, or the one client.
func (c *Client) pubsubNodes() []driver.Driver {
	if c.nodes != nil {
		return c.nodes
	}
	return []driver.Driver{c.d}
}

// groupOn is the routing group of the channels on node number i: every
// channel of a node shares one connection. On a Cluster too: there a
// Client listens with plain pub/sub, which every node hears (its tickets say so),
// so one connection serves every key, and a key whose slot moves is still
// heard.
func groupOn(i int) string { return strconv.Itoa(i) + "/" }

// subscribeOn subscribes key's channel on node, of kind k, in group g.
func (c *Client) subscribeOn(ctx context.Context, g string, node driver.Driver, k driver.Kind, key string, q *keyQueue) error {
	n := &c.notify
	n.mu.Lock()
	s := n.subs[g]
	if s != nil && s.idle != nil {
		s.idle.Stop()
		s.idle = nil
	}
	n.mu.Unlock()

	if s == nil {
		fresh, err := c.newSubscriber(ctx, node, k, key)
		n.mu.Lock()
		switch {
		case err != nil:
			n.mu.Unlock()
			return err
		case n.closed || n.subs[g] == nil && n.queues[key] != q:
			// Closed, or the key's waiters all left meanwhile.
			n.mu.Unlock()
			fresh.close()
			return fmt.Errorf("padlock: no waiter left for %q", key)
		case n.subs[g] == nil:
			if n.subs == nil {
				n.subs = make(map[string]*subscriber)
			}
			n.subs[g] = fresh
			n.mu.Unlock()
			return nil
		}
		// Another key opened the shared connection first: use it.
		s = n.subs[g]
		if s.idle != nil {
			s.idle.Stop()
			s.idle = nil
		}
		n.mu.Unlock()
		fresh.close()
	}
	return s.subscribe(ctx, c.channels(key)...)
}

// subscribe subscribes chans on s's connection.
func (s *subscriber) subscribe(ctx context.Context, chans ...string) error {
	s.mu.Lock()
	for _, ch := range chans {
		s.chans[ch] = struct{}{}
	}
	ps, gen := s.ps, s.gen
	s.mu.Unlock()
	err := s.listen(ctx, ps, chans)
	if _, now := s.current(); err != nil && now != gen {
		return nil // replaced meanwhile: the new connection has them (see redial)
	}
	return err
}

// listen subscribes chans on ps, sharded or not as s is.
func (s *subscriber) listen(ctx context.Context, ps driver.PubSub, chans []string) error {
	return ps.Subscribe(ctx, s.sharded, chans...)
}

// redial replaces s's connection with a new one, subscribed to every
// channel s has, and returns it and its gen; nil if s was closed
// meanwhile. If no connection can be opened it keeps the one it has
// (whose next Receive fails, and redials again).
func (s *subscriber) redial() (driver.PubSub, int) {
	ctx, cancel := context.WithTimeout(context.Background(), subscribeTimeout)
	defer cancel()
	fresh, err := s.node.PubSub(ctx, "")
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		if err == nil {
			_ = fresh.Close()
		}
		return nil, 0
	case err != nil:
		defer s.mu.Unlock()
		return s.ps, s.gen
	}
	old := s.ps
	s.ps, s.gen = fresh, s.gen+1 // from now on subscribe uses it
	s.sure = nil
	gen, chans := s.gen, slices.Collect(maps.Keys(s.chans))
	s.mu.Unlock()
	_ = old.Close()
	// On failure, the next Receive fails too: read redials again.
	_ = s.listen(ctx, fresh, chans)
	return fresh, gen
}

// current is s's connection now, and its gen.
func (s *subscriber) current() (driver.PubSub, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ps, s.gen
}

// close closes the connection and waits for its reader to exit.
func (s *subscriber) close() {
	s.mu.Lock()
	s.closed = true
	ps := s.ps
	s.mu.Unlock()
	_ = ps.Close()
	<-s.done
}

func (s *subscriber) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// newSubscriber opens a pub/sub connection subscribed to key's channel,
// sharded if the server has it, and starts its reader.
func (c *Client) newSubscriber(ctx context.Context, node driver.Driver, k driver.Kind, key string) (*subscriber, error) {
	ctx, cancel := context.WithTimeout(ctx, subscribeTimeout)
	defer cancel()
	n := &c.notify
	n.mu.Lock()
	mode := n.sharded
	n.mu.Unlock()

	var ps driver.PubSub
	var first any // the first confirmation
	var err error
	chans := c.channels(key)
	sharded := mode >= 0
	if sharded {
		if ps, first, err = openPubSub(ctx, node, true, chans); err != nil && isUnknownCommand(err) {
			sharded = false
			n.mu.Lock()
			n.sharded = -1
			n.mu.Unlock()
		}
	}
	if !sharded {
		ps, first, err = openPubSub(ctx, node, false, chans)
	}
	if err != nil {
		return nil, err
	}
	if sharded {
		n.mu.Lock()
		n.sharded = 1
		n.mu.Unlock()
	}
	s := &subscriber{node: node, ps: ps, sharded: sharded, probe: k == driver.Sentinel, done: make(chan struct{}), chans: map[string]struct{}{}}
	for _, ch := range chans {
		s.chans[ch] = struct{}{}
	}
	switch m := first.(type) {
	case *driver.Subscription:
		s.confirmed(0, m)
	case *driver.Message: // a channel the connection had (see driver.PubSub)
		n.received(m.Channel, m.Payload)
	}
	go s.read(n)
	return s, nil
}

// openPubSub opens a pub/sub connection on node (on a Cluster, one that
// hears every node's plain channels), subscribes chans, and returns it
// with what it received first (the first confirmation), by ctx's
// deadline, whatever Redis does (a connection that comes later is
// closed). On failure it closes it.
func openPubSub(ctx context.Context, node driver.Driver, sharded bool, chans []string) (driver.PubSub, any, error) {
	type opened struct {
		ps    driver.PubSub
		first any
	}
	wait := until(ctx)
	o, err := within(ctx, func(ctx context.Context) (opened, error) {
		ps, err := node.PubSub(ctx, "")
		if err != nil {
			return opened{}, err
		}
		var first any
		if err = ps.Subscribe(ctx, sharded, chans...); err == nil {
			first, err = ps.Receive(ctx, wait)
		}
		if err != nil {
			_ = ps.Close()
			return opened{}, err
		}
		return opened{ps, first}, nil
	}, func(o opened) { _ = o.ps.Close() })
	return o.ps, o.first, err
}

// until is the time left to ctx's deadline (subscribeTimeout if it has
// none): how long a Receive may wait for what ctx waits for.
func until(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return max(time.Until(d), time.Millisecond)
	}
	return subscribeTimeout
}

func isUnknownCommand(err error) bool {
	return strings.Contains(strings.ToLower(err.Error()), "unknown command")
}

// read delivers notifications until s is closed. A connection silent for
// n.quiet gets a PING; one silent for as long again is replaced (see
// pubsubQuiet). On a Sentinel failover client, a connection that no longer
// listens on the primary is replaced within failoverProbe (see heard):
// the reader wakes that often to probe, which tells nothing of the
// connection (only an error does, or silence for n.quiet). Messages sent
// while no connection listened are lost: once its channels are subscribed
// again, every waiter looks.
func (s *subscriber) read(n *notifier) {
	defer close(s.done)
	ps, gen := s.current() // only read replaces it (see redial)
	pinged := false        // a PING went out, and nothing came since
	fresh := false         // the connection is new, its channels not yet confirmed
	wait := n.quiet
	if s.probe {
		wait = min(wait, failoverProbe)
	}
	heardAt, probedAt := time.Now(), time.Now()
	for {
		msg, err := ps.Receive(context.Background(), wait)
		timeout := err != nil && driver.IsTimeout(err)
		if err == nil {
			heardAt = time.Now()
		}
		redial := false
		switch {
		case err == nil:
			pinged = false
			switch m := msg.(type) {
			case *driver.Message:
				n.received(m.Channel, m.Payload)
			case *driver.Subscription:
				s.confirmed(gen, m)
				if fresh {
					fresh = false
					n.wakeAll()
				}
			}
		case s.isClosed() || errors.Is(err, driver.ErrClosed):
			return
		case !timeout:
			// Dead, but after an error reply (see driver.PubSub): another.
			time.Sleep(10 * time.Millisecond)
			pinged, fresh, redial = false, true, !isRedisError(err)
		case time.Since(heardAt) < n.quiet:
			// Woken to probe, not yet silent for long: nothing is wrong.
		case !pinged:
			pinged, heardAt = true, time.Now() // the PONG has n.quiet to come
			redial = ps.Ping(context.Background()) != nil
		default:
			redial = true
		}
		if !redial && s.probe && (err == nil || timeout) && time.Since(probedAt) >= failoverProbe {
			probedAt = time.Now()
			if !s.heard(n.id) {
				redial, heardAt = true, time.Now()
			}
		}
		if redial {
			if ps, gen = s.redial(); ps == nil {
				return
			}
			pinged, fresh = false, true
		}
	}
}

// confirmed records a confirmation of a subscription on s's gen-th
// connection.
func (s *subscriber) confirmed(gen int, m *driver.Subscription) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen != gen {
		return
	}
	if s.sure == nil {
		s.sure = map[string]struct{}{}
	}
	s.sure[m.Channel] = struct{}{}
}

// failoverProbe is how often a subscriber of a Sentinel failover client
// checks that it listens on the primary (see heard).
const failoverProbe = time.Second

// probeMsg is the message of heard: neither a grant nor a hint (see
// parseMessage).
const probeMsg = "padlock-probe"

// heard reports whether s's connection listens where the Client's commands
// go: a message on one of its channels that the server confirmed, and that
// only this Client listens to (the one way to wait's, named for id),
// reaches a subscriber there. After a Sentinel
// switch, go-redis moves its command connections to the new primary, but
// not (since v9.12 or so) its pub/sub ones, which stay on the demoted
// primary, where no grant is announced. An error tells nothing: heard
// reports true.
func (s *subscriber) heard(id string) bool {
	s.mu.Lock()
	ch := ""
	for c := range s.sure {
		if strings.HasSuffix(c, "to:"+id) { // not a channel other Clients hear too
			ch = c
			break
		}
	}
	s.mu.Unlock()
	if ch == "" {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), subscribeTimeout)
	defer cancel()
	cmd, key := "publish", ""
	if s.sharded {
		cmd, key = "spublish", ch
	}
	n, err := asInt64(s.node.Do(ctx, key, cmd, ch, probeMsg))
	return err != nil || n > 0
}

// unsubscribeLocked is called when a key has no waiter here any more. Its
// channel stays subscribed (a message on it finds nobody, and nothing is
// sent under the notifier's mu, which a connection being redialled would
// hold up); once no key has waiters, the connection closes after
// subscriberLinger (a key that alternates between free and contended would
// otherwise dial a connection per hand-off), which drops them all.
// c.notify.mu must be held.
func (c *Client) unsubscribeLocked() {
	n := &c.notify
	if n.anySubscribedLocked() {
		return
	}
	for i := range c.pubsubNodes() {
		g := groupOn(i)
		if s := n.subs[g]; s != nil && s.idle == nil {
			s.idle = time.AfterFunc(subscriberLinger, func() { c.closeIdle(g, s) })
		}
	}
}

// closeIdle closes s if it is still idle.
func (c *Client) closeIdle(g string, s *subscriber) {
	n := &c.notify
	n.mu.Lock()
	if n.subs[g] != s || s.idle == nil {
		n.mu.Unlock()
		return // in use again, or closed
	}
	delete(n.subs, g)
	n.mu.Unlock()
	s.close()
}

func (n *notifier) anySubscribedLocked() bool {
	for _, q := range n.queues {
		if q.subscribed {
			return true
		}
	}
	return false
}

// closeSubscribers closes every subscriber, waiting for their readers
// until until at most.
func (n *notifier) closeSubscribers(until time.Time) {
	n.mu.Lock()
	subs := n.subs
	n.subs = nil
	for _, s := range subs {
		if s.idle != nil {
			s.idle.Stop()
			s.idle = nil
		}
	}
	n.mu.Unlock()
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		for _, s := range subs {
			s.close() // waits for its reader, which may be dialing again
		}
	}()
	timer := time.NewTimer(time.Until(until))
	defer timer.Stop()
	select {
	case <-closed:
	case <-timer.C: // the rest end once the Redis client gives up, or is closed
	}
}
