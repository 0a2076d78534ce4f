package padlock

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A Client's waiters. The notifier owns them: each key's queue of this
// Client's waiters (first come first), the waiters by token (for grants),
// the leases of their tickets, and the pub/sub connections they listen
// on, all under its one mutex, mu.
//
// The lock order: a goroutine that holds notifier.mu takes no other
// padlock mutex, except a subscriber's idle timer, which is under
// notifier.mu itself; it sends nothing to Redis and calls no callback (a
// grant's HandOff runs once mu is unlocked: see grantLocked); Close waits
// for the waiters to end on idle, with mu unlocked. The
// scheduler's mu, a subscriber's mu and a Lock's mu are each taken alone,
// or a Lock's mu before the scheduler's (KeepAlive), never the other way;
// under its mu the scheduler only tries a Lock's extendMu, which never
// waits (heldLocks.renewAll).

// A waiter is one Acquire call waiting in its key's queue in this Client.
// The fields after obs are under the notifier's mu.
type waiter struct {
	key   string        // its queue's key (a multi-key lock's first key)
	lock  *Lock         // the waiting Lock
	wake  chan struct{} // attempt now: a release was announced, the head before us gave up, its ticket is gone, Close
	turn  chan struct{} // it became the first of its key's waiters here
	grant chan grant    // the one way to wait: the lock was granted to it (nil on the attempt path)
	obs   *Observer     // the waiting Lock's observer, or nil

	token     string // the waiting Lock's token
	handedOff bool   // its observer was told of a grant

	// The one way to wait (see wait.go).
	ticket    string    // its ticket, as the scripts read it
	queued    bool      // a call found or made its ticket in Redis
	sent      bool      // a call that may make its ticket was sent (its outcome may be unknown)
	alive     time.Time // when the latest such call was sent: a grant came after it
	lease     *lease    // its ticket's renewal in the scheduler
	pending   bool      // to be queued by the release of a Lock of this Client that holds the key
	holdUntil time.Time // while pending: when that Lock expires
	carried   bool      // a release in flight is queueing it
	removed   bool      // it stopped waiting
	left      bool      // its leave is sent, or taken by Close (see Client.Close)
	aside     bool      // it is in its observer's WaitStart, which Close does not wait for (see aside)
	expires   time.Time // when what keeps it out expires, as far as it knows (zero: unknown)
	free      bool      // its last look found what it waits for free, but waiters ahead of it
	since     time.Time // when it began to wait (see Client.Local)
}

// A keyQueue is one key's waiters in this Client, first come first.
type keyQueue struct {
	waiters    []*waiter
	subscribed bool                // its channel is subscribed (or being subscribed)
	holders    map[*Lock]time.Time // Locks of this Client that got the key by waiting, to their deadlines (see wait.go)
}

// notifier is the Client's state for waiting and notifications.
type notifier struct {
	mu       sync.Mutex
	closed   bool
	busy     int           // waiters that Close waits for: in acquireWaiting, not in WaitStart (see aside)
	idle     chan struct{} // while Close waits for busy to fall to 0: closed then
	leaves   []departure   // the leaves of waiters that ended once closed, for Close to send
	departed bool          // Close took leaves: a waiter that ends later leaves by itself
	queues   map[string]*keyQueue
	keys     atomic.Int32           // len(queues), for a release to see without mu that nobody waits here
	tokens   map[string]*waiter     // the one way's waiters, by token
	tickets  map[*lease]*waiter     // the leases of their tickets, to their waiters (see tickets.go)
	subs     map[string]*subscriber // by routing group, see group
	sharded  int                    // 0 unknown, 1 sharded pub/sub works, -1 it does not
	id       string                 // this Client's name in its tickets (see handChannel)
	quiet    time.Duration          // pubsubQuiet (shorter in tests), set before any subscriber starts
}

// addWaiter adds a waiter for l at the tail of its key's queue in this
// Client; it is pending if a Lock of the Client that got the key by
// waiting holds it.
func (c *Client) addWaiter(l *Lock) (*waiter, error) {
	w := &waiter{key: l.key, lock: l, obs: l.observer(), wake: make(chan struct{}, 1), turn: make(chan struct{}, 1),
		grant: make(chan grant, 1), since: time.Now()}
	if m := l.multi(); m != nil {
		w.key = m[0]
	}
	if !l.queued() {
		w.grant = nil // the attempt path: a release is announced, not granted
	}
	q, err := c.queueFor(w.key)
	if err != nil {
		return nil, err
	}
	n := &c.notify
	defer n.mu.Unlock()
	q.waiters = append(q.waiters, w)
	if !l.queued() {
		n.busy++
		return w, nil
	}
	w.token, w.ticket = l.tok(), l.ticket()
	if n.tokens[w.token] != nil { // only with WithToken
		q.waiters = q.waiters[:len(q.waiters)-1]
		if len(q.waiters) == 0 && len(q.holders) == 0 {
			delete(n.queues, w.key) // made by queueFor for this call
			n.keys.Add(-1)
		}
		return nil, fmt.Errorf("%w: another Acquire with token %q waits in this Client", ErrInvalid, w.token)
	}
	if n.tokens == nil {
		n.tokens = make(map[string]*waiter)
	}
	n.tokens[w.token] = w
	n.busy++
	// A chosen token queues itself: it may find an earlier wait's ticket
	// (or the mark that it left), which a release could not tell from a
	// late call.
	if l.multi() == nil && !l.chosenToken() {
		for h, until := range q.holders {
			// Not behind a holder of its own token: that one is itself.
			if time.Now().Before(until) && sameLimit(h, l) && h.tok() != w.token {
				w.pending, w.holdUntil = true, latest(w.holdUntil, until)
			}
		}
	}
	return w, nil
}

// sameLimit reports whether a and b are not semaphore places of
// different n (a pending waiter makes no attempt that would find out).
func sameLimit(a, b *Lock) bool {
	ka, kb := a.counted(), b.counted()
	return ka == nil || kb == nil || ka.limit == kb.limit
}

// removeWaiter takes w out of this Client's queue and stops renewing its
// ticket; unless acquired, its Lock does not hold the key. It returns the
// leave that w must send if it may have a ticket (or a grant) in Redis,
// or nil: none, or Close sends it (see Client.Close).
func (c *Client) removeWaiter(w *waiter, acquired bool) *departure {
	n := &c.notify
	n.mu.Lock()
	w.removed = true
	var d *departure
	if dep, ok := n.departLocked(w, acquired); ok {
		if n.closed && !n.departed {
			n.leaves = append(n.leaves, dep) // Close sends it
		} else {
			d = &dep
		}
	}
	ls := n.setLeaseLocked(w, nil)
	if n.tokens[w.token] == w {
		delete(n.tokens, w.token)
	}
	if q := n.queues[w.key]; q != nil && !acquired {
		delete(q.holders, w.lock)
	}
	c.dequeueLocked(w, acquired)
	n.mu.Unlock()
	if ls != nil {
		c.sched.remove(ls)
	}
	return d
}

// departLocked returns w's departure, once: unless acquired, if w may
// have a ticket (or a grant) in Redis that it has not left. The
// notifier's mu must be held.
func (n *notifier) departLocked(w *waiter, acquired bool) (departure, bool) {
	if acquired || w.left || !(w.sent || w.queued || w.carried) {
		return departure{}, false
	}
	w.left = true
	return departure{l: w.lock, ticket: w.ticket, keep: w.lock.chosenToken() && !w.queued}, true
}

// wakeKey wakes every waiter of key in this Client but but to attempt.
func (c *Client) wakeKey(key string, but *waiter) {
	c.notify.mu.Lock()
	defer c.notify.mu.Unlock()
	if q := c.notify.queues[key]; q != nil {
		for _, w := range q.waiters {
			if w != but {
				signal(w.wake)
			}
		}
	}
}

// isPending reports whether w waits for a release of its Client to queue
// it.
func (c *Client) isPending(w *waiter) bool {
	c.notify.mu.Lock()
	defer c.notify.mu.Unlock()
	return w.pending
}

// mayAttempt reports whether w may attempt now: not while a release of
// its Client is to queue it, nor, on the attempt path, before its turn.
func (c *Client) mayAttempt(w *waiter) bool {
	n := &c.notify
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false // it returns ErrClosed (see wait.sleep)
	}
	if !w.lock.queued() {
		q := n.queues[w.key]
		return q == nil || q.waiters[0] == w // no queue: the Client closed (its next look says so)
	}
	return !w.pending
}

// stopPending makes a pending waiter attempt by itself, unless a release
// in flight carries it, and reports whether it must attempt: not if a
// release queued it meanwhile.
func (c *Client) stopPending(w *waiter) bool {
	c.notify.mu.Lock()
	defer c.notify.mu.Unlock()
	if !w.pending {
		return false
	}
	if !w.carried {
		w.pending = false
		return true
	}
	return false
}

// nowHolding records that l, a Lock that got its key by waiting, holds it:
// waiters that come meanwhile are queued by its release.
func (c *Client) nowHolding(l *Lock) {
	if l.multi() != nil || !l.queued() {
		return // its release queues nobody (see takePending)
	}
	until := l.Deadline()
	key := l.key
	n := &c.notify
	n.mu.Lock()
	defer n.mu.Unlock()
	if q := n.queues[key]; q != nil {
		if q.holders == nil {
			q.holders = make(map[*Lock]time.Time)
		}
		q.holders[l] = until
	}
}

// takePending returns the registrations (token, ticket) of the pending
// waiters of l's key that the release of l is to queue, and those
// waiters, now carried by it; l no longer holds the key here. Once the
// Client is closed it queues nobody: its pending waiters return ErrClosed
// (a Release works after Close; one in WaitStart has nothing to leave).
func (c *Client) takePending(l *Lock) ([]any, []*waiter) {
	n := &c.notify
	if n.keys.Load() == 0 {
		return nil, nil // nobody waits in this Client: no Client-wide lock on a lone release
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	key := l.key
	if m := l.multi(); m != nil {
		key = m[0]
	}
	q := n.queues[key]
	if q == nil {
		return nil, nil
	}
	delete(q.holders, l)
	if l.multi() != nil || n.closed {
		return nil, nil
	}
	var regs []any
	var ws []*waiter
	for _, w := range q.waiters {
		if w.pending && !w.carried {
			w.carried = true
			regs = append(regs, w.token, w.ticket)
			ws = append(ws, w)
		}
	}
	return regs, ws
}

// carriedBack settles the waiters a release carried: queued in Redis by a
// release sent at sent, or, with a zero sent, not queued, to attempt by
// themselves.
func (c *Client) carriedBack(ws []*waiter, sent time.Time) {
	for _, w := range ws {
		c.notify.mu.Lock()
		w.carried, w.pending = false, false
		c.notify.mu.Unlock()
		if sent.IsZero() {
			signal(w.wake)
		} else {
			c.queued(w, sent, nil)
		}
	}
}

// retoken gives l, whose ticket lapsed (or whose grant was lost before it
// was confirmed), a new token, so that a late word of the old one is not
// taken for a new grant, and a ticket of its own again.
func (c *Client) retoken(l *Lock, w *waiter) {
	n := &c.notify
	n.mu.Lock()
	delete(n.tokens, w.token)
	ls := n.setLeaseLocked(w, nil)
	w.queued, w.sent, w.alive = false, false, time.Time{}
	if q := n.queues[w.key]; q != nil {
		delete(q.holders, l) // a grant it did not confirm: it holds nothing
	}
	n.mu.Unlock()
	if ls != nil {
		c.sched.remove(ls)
	}
	value := l.value
	if !l.chosenToken() { // a chosen token stays: a grant to it is confirmed (see grantLocked)
		tok := l.tok()
		prefix := tok[:strings.LastIndexByte(tok, '/')+1] // a leadership's "leader/"; random tokens have no '/'
		value = prefix + newToken() + l.value[len(tok):]
	}
	n.mu.Lock()
	l.value, l.args[0] = value, value // under mu: Client.Local reads a waiter's
	w.token, w.ticket = l.tok(), l.ticket()
	n.tokens[w.token] = w
	n.mu.Unlock()
}

// deliver hands a reply's news to this Client's waiters: grants counted
// from base, a moment before the grant; bg as for Client.observe (the
// observer's HandOff, then the grant, run on the Client's observer
// goroutine).
func (c *Client) deliver(nw news, base time.Time, bg bool) {
	if len(nw.grants) == 0 && len(nw.hints) == 0 {
		return // the common case: nobody else waits here
	}
	n := &c.notify
	var handed []func()
	n.mu.Lock()
	for _, h := range nw.hints {
		n.hintLocked(h.token, h.n)
	}
	for _, g := range nw.grants {
		if f := n.grantLocked(g.token, grant{fence: g.n, base: base}); f != nil {
			handed = append(handed, f)
		}
	}
	n.mu.Unlock()
	for _, f := range handed {
		c.observe(bg, f)
	}
}

// hintLocked tells the waiter with token tok, if it is still here, that
// it is first in line and that the holder expires in ms: it looks then.
func (n *notifier) hintLocked(tok string, ms int64) {
	if w := n.tokens[tok]; w != nil {
		n.expiresInLocked(w, time.Now(), time.Duration(ms)*time.Millisecond)
		signal(w.turn)
	}
}

// grantLocked records a grant to the waiter with token tok, if it is
// still here, and returns what hands it over, to be called once the
// notifier's mu is unlocked: its observer's HandOff (which may call
// padlock), then the grant. A zero base means a message, counted from the
// last moment its ticket was known to be in the queue.
func (n *notifier) grantLocked(tok string, g grant) func() {
	w := n.tokens[tok]
	if w == nil {
		return nil // it left: its leave passes the lock on
	}
	if w.lock.chosenToken() {
		// A chosen token is used again by later waits: a grant to it may
		// have been meant for an earlier one, and passed on since. It
		// attempts, which confirms it, and waits on if not.
		signal(w.wake)
		return nil
	}
	if g.base.IsZero() {
		g.base = w.alive
	}
	if !w.lock.fenced() {
		g.fence = 0
	}
	delete(n.tokens, tok)
	handOff := n.handOffLocked(w)
	if q := n.queues[w.key]; q != nil && !g.base.IsZero() && w.lock.multi() == nil {
		// It holds the key now: waiters that come meanwhile are queued by
		// its release.
		if q.holders == nil {
			q.holders = make(map[*Lock]time.Time)
		}
		q.holders[w.lock] = g.base.Add(w.lock.ttl - drift(w.lock.ttl))
	}
	return func() {
		if handOff != nil {
			handOff(w.key)
		}
		select {
		case w.grant <- g:
		default:
		}
	}
}

// handOffLocked returns w's observer's HandOff the first time the lock is
// handed to w, else nil.
func (n *notifier) handOffLocked(w *waiter) func(string) {
	if w.handedOff || w.obs == nil || w.obs.HandOff == nil {
		return nil
	}
	w.handedOff = true
	return w.obs.HandOff
}

// handChannel is the channel on which a grant is announced to the Client
// named id, for key: a side key's name (see sideKey), so that it shares
// key's Cluster slot and ACL prefix. Only that Client listens.
func handChannel(key, id string) string {
	return sideKey(key, "to:"+id)
}

// channels are the channels a Client listens on for key: its own channel
// for the key on the one way to wait, or the key's own on the attempt path
// (see pubsub.go).
func (c *Client) channels(key string) []string {
	if c.nodes != nil || !queueable(key) {
		return []string{key}
	}
	return []string{handChannel(key, c.notify.id)}
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
		n.keys.Add(1)
	}
	return q, nil
}

// dequeueLocked removes w from its queue. If w was the head, the next
// waiter becomes head; on the attempt path it is also woken to attempt at
// once if w did not get the lock (it may be free). The last waiter out
// unsubscribes the key. The notifier's mu must be held.
func (c *Client) dequeueLocked(w *waiter, acquired bool) {
	n := &c.notify
	q := n.queues[w.key]
	if q == nil {
		return
	}
	i := slices.Index(q.waiters, w)
	if i < 0 {
		return
	}
	q.waiters = slices.Delete(q.waiters, i, i+1)
	if i == 0 && len(q.waiters) > 0 {
		next := q.waiters[0]
		signal(next.turn)
		if !acquired && w.grant == nil { // on the attempt path
			signal(next.wake)
		}
	}
	if len(q.waiters) == 0 {
		delete(n.queues, w.key)
		n.keys.Add(-1)
		if q.subscribed {
			c.unsubscribeLocked()
		}
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// received handles a message on channel: a grant to one of this Client's
// waiters ("<token> <fence>"), or a release of the key (wake its head).
func (n *notifier) received(channel, msg string) {
	n.mu.Lock()
	if msg != releasedMsg {
		var handed func()
		switch tok, num, hint, ok := parseMessage(msg); {
		case ok && hint:
			n.hintLocked(tok, num)
		case ok:
			handed = n.grantLocked(tok, grant{fence: num})
		}
		n.mu.Unlock()
		if handed != nil {
			handed()
		}
		return
	}
	if q := n.queues[channel]; q != nil && len(q.waiters) > 0 {
		signal(q.waiters[0].wake)
	}
	n.mu.Unlock()
}

// wakeAll wakes every waiter to attempt: messages may have been lost.
func (n *notifier) wakeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, q := range n.queues {
		for _, w := range q.waiters {
			signal(w.wake)
		}
	}
}

// closeWaiters marks the notifier closed, wakes every waiter and waits
// for them to end, until until at the latest; it returns what they have
// to leave in Redis: theirs, and that of the waiters in WaitStart (see
// aside), which return ErrClosed once back. A waiter still busy at until
// (a round trip that Redis does not answer) leaves by itself once it
// ends.
func (n *notifier) closeWaiters(until time.Time) []departure {
	n.mu.Lock()
	n.closed = true
	for _, q := range n.queues {
		for _, w := range q.waiters {
			signal(w.wake)
			signal(w.turn)
		}
	}
	if n.busy > 0 {
		n.idle = make(chan struct{})
		idle := n.idle
		n.mu.Unlock()
		t := time.NewTimer(time.Until(until))
		select {
		case <-idle:
		case <-t.C:
		}
		t.Stop()
		n.mu.Lock()
		n.idle = nil
	}
	defer n.mu.Unlock()
	leaves := n.leaves
	n.leaves, n.departed = nil, true
	for _, q := range n.queues {
		for _, w := range q.waiters {
			if !w.aside {
				continue // busy still: it leaves by itself
			}
			if d, ok := n.departLocked(w, false); ok {
				leaves = append(leaves, d)
				if n.tokens[w.token] == w {
					delete(n.tokens, w.token) // it has left: no grant to it is handed over here
				}
			}
		}
	}
	return leaves
}

func (n *notifier) isClosed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.closed
}
