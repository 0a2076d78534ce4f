package padlock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Release notifications.
//
// The release script publishes "released" on a channel named like the
// lock's key (SPUBLISH where the server has sharded pub/sub, so it goes only
// to the key's shard; PUBLISH otherwise). Waiters of one Client queue per
// key, first come first served; while a key has waiters the Client
// subscribes its channel, and a message wakes only the head of the queue,
// which makes one attempt. The head also keeps its own timer (the holder's
// remaining ttl, or the backoff), in case a message is lost.

// errAlreadySubscribed: someone else subscribed the channel.
var errAlreadySubscribed = errors.New("padlock: already subscribed")

// releasedMsg is the payload of a release notification.
const releasedMsg = "released"

// subscribeTimeout bounds how long a waiter waits for its subscription to
// be confirmed before it relies on its timer alone.
const subscribeTimeout = time.Second

// subscriberLinger is how long a pub/sub connection stays open once no
// key uses it.
const subscriberLinger = 200 * time.Millisecond

// A waiter is one Acquire call waiting in its key's queue.
type waiter struct {
	key        string
	token      string        // the waiting Lock's token: a release may name it
	wake       chan struct{} // a release was announced, or the head before us gave up: attempt now
	turn       chan struct{} // we became the head of the queue
	registered bool          // queued in Redis (see handoff.go); under the notifier's mu
	obs        *Observer     // the waiting Lock's observer, or nil
	all        bool          // a free waiter woken by every "released" (a shared hold), not only when named

	// A waiter that a release may hand the lock to (see handoff.go); the
	// fields below are under the notifier's mu.
	handing   bool
	fenced    bool
	lock      *Lock // the waiting Lock (compared, not read)
	ttl       time.Duration
	hand      chan handoff // the lock was handed to it
	value     string       // the waiting Lock's value
	args      [5]any       // its registration, as script arguments
	firstSent time.Time    // when a call that queues it in Redis was first sent
	handedOff bool         // its observer was told of the hand-off
}

// A keyQueue is the FIFO of one key's waiters, head first, and its free
// waiters (semaphores and shared holds), who wait in Redis's queue rather
// than in turn here: a semaphore's release names the waiter that its
// freed place goes to, and a "released" wakes every shared one.
type keyQueue struct {
	waiters    []*waiter
	free       []*waiter
	subscribed bool // its channel is subscribed (or being subscribed)

	holder      *Lock     // a Lock of this Client handed the key by a waiter, until released
	holderUntil time.Time // and its deadline
	renewed     time.Time // when its waiters' registrations were last all sent (see registrations)
}

// A subscriber is one pub/sub connection and the goroutine reading it.
type subscriber struct {
	ps      *redis.PubSub
	sharded bool
	done    chan struct{} // closed when the goroutine has exited
	idle    *time.Timer   // while no key uses it: closes it; under the notifier's mu
}

// notifier is the Client's state for release notifications.
type notifier struct {
	mu      sync.Mutex
	closed  bool
	queues  map[string]*keyQueue
	subs    map[string]*subscriber // by routing group, see group
	sharded int                    // 0 unknown, 1 sharded pub/sub works, -1 it does not
	handing atomic.Int64           // waiters with handing set, in the queues: when 0, a release looks no further

	id        string            // this Client's name in its waiters' registrations (see handChannel)
	idArg     any               // id, boxed once as a script argument
	handChans map[string]string // the hand-off channel of each key with a queue, to the key
}

// enqueue adds a waiter for key at the tail of its queue. It reports
// whether the waiter is the head (and so may attempt at once).
func (c *Client) enqueue(key, token string, obs *Observer) (*waiter, bool, error) {
	w := &waiter{key: key, token: token, obs: obs, wake: make(chan struct{}, 1), turn: make(chan struct{}, 1)}
	q, err := c.queueFor(key)
	if err != nil {
		return nil, false, err
	}
	defer c.notify.mu.Unlock()
	q.waiters = append(q.waiters, w)
	return w, len(q.waiters) == 1, nil
}

// enqueueFree adds a free waiter for key (see keyQueue); all says whether
// every "released" wakes it.
func (c *Client) enqueueFree(key, token string, all bool) (*waiter, error) {
	w := &waiter{key: key, token: token, all: all, wake: make(chan struct{}, 1), turn: make(chan struct{}, 1)}
	q, err := c.queueFor(key)
	if err != nil {
		return nil, err
	}
	defer c.notify.mu.Unlock()
	q.free = append(q.free, w)
	return w, nil
}

// queueFor returns key's queue, made if needed, with the notifier's mu
// held for the caller to unlock; or ErrClosed, with it unlocked.
func (c *Client) queueFor(key string) (*keyQueue, error) {
	n := &c.notify
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, ErrClosed
	}
	if n.queues == nil {
		n.queues = make(map[string]*keyQueue)
	}
	q := n.queues[key]
	if q == nil {
		q = &keyQueue{}
		n.queues[key] = q
		if n.handChans == nil {
			n.handChans = make(map[string]string)
		}
		if queueable(key) {
			n.handChans[handChannel(key, n.id)] = key
		}
	}
	return q, nil
}

// dequeue removes w from its queue. If w was the head, the next waiter
// becomes head: woken to attempt at once if w did not get the lock (it may
// be free), or only told it is head if w got it (it is held: the next
// release will wake it). The last waiter out unsubscribes the key.
func (c *Client) dequeue(w *waiter, acquired bool) {
	n := &c.notify
	n.mu.Lock()
	q := n.queues[w.key]
	if q == nil {
		n.mu.Unlock()
		return
	}
	head := len(q.waiters) > 0 && q.waiters[0] == w
	for i, x := range q.waiters {
		if x == w {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			if w.handing {
				n.handing.Add(-1)
			}
			break
		}
	}
	for i, x := range q.free {
		if x == w {
			q.free = append(q.free[:i], q.free[i+1:]...)
			break
		}
	}
	if head && len(q.waiters) > 0 {
		next := q.waiters[0]
		signal(next.turn)
		if !acquired || !next.registered {
			// The lock may be free; or the next waiter is not queued in
			// Redis, so no release would name it: it must attempt now.
			signal(next.wake)
		}
	}
	if len(q.waiters) == 0 && len(q.free) == 0 {
		delete(n.queues, w.key)
		if queueable(w.key) {
			delete(n.handChans, handChannel(w.key, n.id))
		}
		if q.subscribed {
			c.unsubscribeLocked(w.key)
		}
	}
	n.mu.Unlock()
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// released handles a release notification of key: msg is the token of
// the waiter the lock was handed to (wake it, if it is ours), or
// releasedMsg (wake our head).
func (n *notifier) released(key, msg string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if tok, fence, ok := parseHandoff(msg); ok {
		// On this Client's own hand-off channel of the key (see handChannel).
		if k, ok := n.handChans[key]; ok {
			n.deliverLocked(k, tok, handoff{fence: fence}, true)
		}
		return
	}
	q := n.queues[key]
	if q == nil {
		return
	}
	for _, w := range q.free {
		if w.token == msg || w.all && msg == releasedMsg {
			signal(w.wake)
		}
	}
	if len(q.waiters) == 0 {
		return
	}
	if msg == releasedMsg {
		signal(q.waiters[0].wake)
		return
	}
	for _, w := range q.waiters {
		if w.token == msg {
			signal(w.wake)
			n.handOffLocked(w)
			return
		}
	}
}

// subscribe makes sure key's channel is subscribed, and for a new
// connection waits (up to subscribeTimeout, or ctx) for Redis to confirm
// it. It reports whether this call subscribed the channel; on failure the
// waiters rely on their timers alone.
func (c *Client) subscribe(ctx context.Context, key string) bool {
	return c.trySubscribe(ctx, key) == nil
}

func (c *Client) trySubscribe(ctx context.Context, key string) error {
	n := &c.notify
	n.mu.Lock()
	q := n.queues[key]
	if n.closed || q == nil || q.subscribed {
		n.mu.Unlock()
		return errAlreadySubscribed
	}
	q.subscribed = true
	n.mu.Unlock()

	nodes := c.pubsubNodes()
	var errs []error
	for i, node := range nodes {
		if err := c.subscribeOn(ctx, c.groupOn(i, node, key), node, key, q); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == len(nodes) {
		n.mu.Lock()
		q.subscribed = false
		n.mu.Unlock()
		return errors.Join(errs...)
	}
	return nil
}

// pubsubNodes are the servers whose releases a waiter listens to: every
// node of a Redlock, or the one client.
func (c *Client) pubsubNodes() []redis.UniversalClient {
	if c.nodes != nil {
		return c.nodes
	}
	return []redis.UniversalClient{c.rdb}
}

// groupOn is the routing group of key's channel on node number i: every
// channel of a plain client shares one connection; on a Cluster or a Ring,
// where channels live on different nodes, each key has its own.
func (c *Client) groupOn(i int, node redis.UniversalClient, key string) string {
	if _, ok := node.(*redis.Client); ok {
		key = ""
	}
	return strconv.Itoa(i) + "/" + key
}

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
			return errAlreadySubscribed
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
	if s.sharded {
		return s.ps.SSubscribe(ctx, c.channels(key)...)
	}
	return s.ps.Subscribe(ctx, c.channels(key)...)
}

// close closes the connection and waits for its reader to exit.
func (s *subscriber) close() {
	_ = s.ps.Close()
	<-s.done
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
	var err error
	sharded := mode >= 0
	if sharded {
		ps = node.SSubscribe(ctx, c.channels(key)...)
		if _, err = ps.Receive(ctx); err != nil && isUnknownCommand(err) {
			_ = ps.Close()
			sharded = false
			n.mu.Lock()
			n.sharded = -1
			n.mu.Unlock()
		}
	}
	if !sharded {
		ps = node.Subscribe(ctx, c.channels(key)...)
		_, err = ps.Receive(ctx)
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
	s := &subscriber{ps: ps, sharded: sharded, done: make(chan struct{})}
	go s.read(n)
	return s, nil
}

func isUnknownCommand(err error) bool {
	return strings.Contains(strings.ToLower(err.Error()), "unknown command")
}

// read delivers notifications until the connection is closed.
func (s *subscriber) read(n *notifier) {
	defer close(s.done)
	for {
		msg, err := s.ps.Receive(context.Background())
		if err != nil {
			if errors.Is(err, redis.ErrClosed) || strings.Contains(err.Error(), "closed") {
				return
			}
			// go-redis reconnects and resubscribes on the next Receive;
			// messages sent meanwhile are lost, and timers cover them.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if m, ok := msg.(*redis.Message); ok {
			n.released(m.Channel, m.Payload)
		}
	}
}

// unsubscribeLocked drops key's channel; a connection left with no channel
// closes after subscriberLinger. c.notify.mu must be held.
func (c *Client) unsubscribeLocked(key string) {
	n := &c.notify
	for i, node := range c.pubsubNodes() {
		g := c.groupOn(i, node, key)
		s := n.subs[g]
		if s == nil {
			continue
		}
		if g[len(g)-1] != '/' || !n.anySubscribedLocked() {
			// Idle: keep the connection a little while, for the next waiter
			// (a key that alternates between free and contended would
			// otherwise dial a connection per hand-off).
			if s.idle == nil {
				s.idle = time.AfterFunc(subscriberLinger, func() { c.closeIdle(g, s) })
			}
			continue
		}
		// The shared connection stays open for the other keys.
		ctx, cancel := context.WithTimeout(context.Background(), subscribeTimeout)
		if s.sharded {
			_ = s.ps.SUnsubscribe(ctx, c.channels(key)...)
		} else {
			_ = s.ps.Unsubscribe(ctx, c.channels(key)...)
		}
		cancel()
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

// closeAll marks the notifier closed, wakes every waiter, and closes every
// subscriber, waiting for their readers.
func (n *notifier) closeAll() {
	n.mu.Lock()
	n.closed = true
	for _, q := range n.queues {
		for _, w := range append(q.waiters, q.free...) {
			signal(w.wake)
			signal(w.turn)
		}
	}
	subs := n.subs
	n.subs = nil
	for _, s := range subs {
		if s.idle != nil {
			s.idle.Stop()
			s.idle = nil
		}
	}
	n.mu.Unlock()
	for _, s := range subs {
		s.close()
	}
}

func (n *notifier) isClosed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.closed
}

// Close ends the Client's background work and waits for its goroutines to
// exit: every Acquire or Do waiting on it returns ErrClosed, and every
// KeepAlive of its locks ends with cause ErrClosed (renewing stops; the
// locks stay held in Redis until released or expired). Releases that
// could not reach Redis and were being retried in the background (see
// Lock.Release) are abandoned: those locks expire by their ttl. It does not
// release any lock and does not close the go-redis client. Later calls that
// wait or keep alive return ErrClosed; Release still works. Close is
// idempotent and always returns nil.
func (c *Client) Close() error {
	if c == nil {
		return nil
	}
	c.notify.closeAll()
	c.sched.close()
	return nil
}
