package padlock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
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
	node    redis.UniversalClient
	sharded bool
	probe   bool          // a Sentinel failover client's: checks that it listens on the primary (see heard)
	done    chan struct{} // closed when the goroutine has exited
	idle    *time.Timer   // while no key uses it: closes it; under the notifier's mu

	mu     sync.Mutex
	ps     *redis.PubSub       // replaced when it is found dead (see pubsubQuiet)
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
		if c.subscribeOn(ctx, groupOn(i), node, key, q) == nil {
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
func (c *Client) pubsubNodes() []redis.UniversalClient {
	if c.nodes != nil {
		return c.nodes
	}
	return []redis.UniversalClient{c.rdb}
}

// groupOn is the routing group of the channels on node number i: every
// channel of a node shares one connection. On a Cluster too: there a
// Client listens with plain pub/sub, which every node hears (its tickets say so),
// so one connection serves every key, and a key whose slot moves is still
// heard.
func groupOn(i int) string { return strconv.Itoa(i) + "/" }

// subscribeOn subscribes key's channel on node, in group g.
func (c *Client) subscribeOn(ctx context.Context, g string, node redis.UniversalClient, key string, q *keyQueue) error {
	n := &c.notify
	n.mu.Lock()
	s := n.subs[g]
	if s != nil && s.idle != nil {
		s.idle.Stop()
		s.idle = nil
	}
	n.mu.Unlock()

	if s == nil {
		fresh, err := c.newSubscriber(ctx, node, key)
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
	ps := s.ps
	s.mu.Unlock()
	err := s.listen(ctx, ps, chans)
	if err != nil && s.current() != ps {
		return nil // replaced meanwhile: the new connection has them (see redial)
	}
	return err
}

// listen subscribes chans on ps, sharded or not as s is.
func (s *subscriber) listen(ctx context.Context, ps *redis.PubSub, chans []string) error {
	if s.sharded {
		return ps.SSubscribe(ctx, chans...)
	}
	return ps.Subscribe(ctx, chans...)
}

// redial replaces s's connection with a new one, subscribed to every
// channel s has, and returns it; nil if s was closed meanwhile.
func (s *subscriber) redial() *redis.PubSub {
	var fresh *redis.PubSub
	if s.sharded {
		fresh = s.node.SSubscribe(context.Background())
	} else {
		fresh = s.node.Subscribe(context.Background())
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = fresh.Close()
		return nil
	}
	old := s.ps
	s.ps = fresh // from now on subscribe uses it
	s.sure = nil
	chans := slices.Collect(maps.Keys(s.chans))
	s.mu.Unlock()
	_ = old.Close()
	ctx, cancel := context.WithTimeout(context.Background(), subscribeTimeout)
	defer cancel()
	// On failure go-redis dials again, and subscribes them, on the next
	// receive.
	_ = s.listen(ctx, fresh, chans)
	return fresh
}

// current is s's connection now.
func (s *subscriber) current() *redis.PubSub {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ps
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
func (c *Client) newSubscriber(ctx context.Context, node redis.UniversalClient, key string) (*subscriber, error) {
	ctx, cancel := context.WithTimeout(ctx, subscribeTimeout)
	defer cancel()
	n := &c.notify
	n.mu.Lock()
	mode := n.sharded
	n.mu.Unlock()

	var ps *redis.PubSub
	var first any // the first confirmation
	var err error
	chans := c.channels(key)
	sharded := mode >= 0
	if sharded {
		ps = node.SSubscribe(ctx, chans...)
		if first, err = ps.Receive(ctx); err != nil && isUnknownCommand(err) {
			_ = ps.Close()
			sharded = false
			n.mu.Lock()
			n.sharded = -1
			n.mu.Unlock()
		}
	}
	if !sharded {
		ps = node.Subscribe(ctx, chans...)
		first, err = ps.Receive(ctx)
	}
	if err != nil {
		_ = ps.Close()
		return nil, err
	}
	if sharded {
		n.mu.Lock()
		n.sharded = 1
		n.mu.Unlock()
	}
	s := &subscriber{node: node, ps: ps, sharded: sharded, probe: isFailover(node), done: make(chan struct{}), chans: map[string]struct{}{}}
	for _, ch := range chans {
		s.chans[ch] = struct{}{}
	}
	if m, ok := first.(*redis.Subscription); ok {
		s.confirmed(ps, m)
	}
	go s.read(n)
	return s, nil
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
	ps := s.current() // only read replaces it (see redial)
	pinged := false   // a PING went out, and nothing came since
	fresh := false    // the connection is new, its channels not yet confirmed
	wait := n.quiet
	if s.probe {
		wait = min(wait, failoverProbe)
	}
	heardAt, probedAt := time.Now(), time.Now()
	for {
		msg, err := ps.ReceiveTimeout(context.Background(), wait)
		var ne net.Error
		timeout := err != nil && errors.As(err, &ne) && ne.Timeout()
		if err == nil {
			heardAt = time.Now()
		}
		switch {
		case err == nil:
			pinged = false
			switch m := msg.(type) {
			case *redis.Message:
				n.received(m.Channel, m.Payload)
			case *redis.Subscription:
				s.confirmed(ps, m)
				if fresh {
					fresh = false
					n.wakeAll()
				}
			}
		case s.isClosed() || errors.Is(err, redis.ErrClosed):
			return
		case !timeout:
			// go-redis dials again and resubscribes on the next receive.
			time.Sleep(10 * time.Millisecond)
			pinged, fresh = false, true
		case time.Since(heardAt) < n.quiet:
			// Woken to probe, not yet silent for long: nothing is wrong.
		case !pinged:
			pinged, heardAt = true, time.Now() // the PONG has n.quiet to come
			if err := ps.Ping(context.Background()); err != nil {
				pinged, fresh = false, true // go-redis dialled again, and resubscribed
			}
		default:
			if ps = s.redial(); ps == nil {
				return
			}
			pinged, fresh = false, true
		}
		if s.probe && (err == nil || timeout) && time.Since(probedAt) >= failoverProbe {
			probedAt = time.Now()
			if !s.heard(n.id) {
				if ps = s.redial(); ps == nil {
					return
				}
				pinged, fresh, heardAt = false, true, time.Now()
			}
		}
	}
}

// confirmed records a confirmation of a subscription on ps.
func (s *subscriber) confirmed(ps *redis.PubSub, m *redis.Subscription) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ps != ps || !strings.HasSuffix(m.Kind, "subscribe") || strings.HasSuffix(m.Kind, "unsubscribe") {
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
	var cmd *redis.IntCmd
	if s.sharded {
		cmd = s.node.SPublish(ctx, ch, probeMsg)
	} else {
		cmd = s.node.Publish(ctx, ch, probeMsg)
	}
	n, err := cmd.Result()
	return err != nil || n > 0
}

// isFailover reports whether rdb is a Sentinel failover client (go-redis
// names its address so).
func isFailover(rdb redis.UniversalClient) bool {
	c, ok := rdb.(*redis.Client)
	return ok && c.Options().Addr == "FailoverClient"
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
