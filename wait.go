package padlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The one way to wait.
//
// Every lock whose keys can have side keys, on one Redis or a Cluster,
// waits the same way whatever its kind (lock, semaphore place, shared
// hold, several keys; see lua/grant.lua). A waiter that finds the lock
// held queues a ticket in Redis: a key of its own that its Client renews
// with its other renewals (see the scheduler), and that lapses when it
// does not. Whatever frees capacity (a release, a waiter leaving, an
// attempt that finds a holder expired) runs one grant step in the same
// script: it gives the freed capacity to the tickets at the head of the
// queue, in order, and tells their Clients, the caller's own in the reply
// and the others by a message on their channel for the key.
//
// A waiter that missed its message learns of its grant when its ticket's
// renewal finds the ticket gone, and the first waiter of each Client for
// a key also looks when the holder would expire. Inside one Client, a
// waiter that comes while a Lock the Client got by waiting holds the key
// makes no round trip of its own: that Lock's release queues it first
// (pending), unless pendingMax passes before.

// Tickets and how long they live.
const (
	ticketLife    = 5 * time.Second        // a ticket's life unless renewed: a dead waiter is skipped after it (or its ttl, if shorter)
	minTicketLife = 200 * time.Millisecond // but no shorter than this
	goneLife      = 10 * time.Second       // how long Redis remembers that a waiter left
	queueLife     = 2 * ticketLife         // how long a queue lives after its last renewal: never shortened by a ticket's
	pendingMax    = 100 * time.Millisecond // the longest a waiter waits for a release of its Client to queue it
)

// ticketLifeFor is the life of the ticket of a lock with ttl.
func ticketLifeFor(ttl time.Duration) time.Duration {
	return min(ticketLife, max(ttl, minTicketLife))
}

// A grant tells a waiter that the lock is its own: with fence, at a
// moment after base.
type grant struct {
	fence int64
	base  time.Time
}

// Reply codes of wait.lua.
const (
	codeWait   = 0 // held: it waits
	codeHeld   = 1
	codeBehind = 2 // free, but waiters ahead of it wait for something else: it waits
	codeLimit  = 3
	codeGone   = 4
)

// queueWaiting is Acquire for a lock whose waiters queue in Redis.
func (c *Client) queueWaiting(ctx context.Context, l *Lock, o options) (_ *Lock, err error) {
	w, err := c.addWaiter(l)
	if err != nil {
		return nil, opError("acquire", l.key, err)
	}
	defer func() {
		if inRedis, queued := c.removeWaiter(w, err == nil); inRedis && err != nil {
			// A chosen token that no reply has shown waiting may have held
			// the key before this call: what it holds stays.
			l.leave(ctx, l.chosenToken() && !queued)
		}
	}()
	waiting := false // whether the observer was told this call waits
	if obs := l.observer(); obs != nil {
		defer func() {
			if waiting && obs.WaitDone != nil {
				obs.WaitDone(ctx, l.key)
			}
		}()
	}
	held := false       // whether the lock was found held: only then is a timeout contention
	subscribed := false // whether this call has subscribed the key's channel
	mustAttempt := true // the next step is an attempt (else: a wait)
	for attempt := 0; ; {
		if mustAttempt && !c.isPending(w) {
			if err := ctx.Err(); err != nil {
				if held {
					return nil, c.waitEnded(ctx, w)
				}
				return nil, opError("acquire", l.key, err)
			}
			sent := time.Now()
			code, n, err := c.waitAttempt(ctx, l, w)
			switch {
			case err == nil:
				c.nowHolding(l)
				return l, nil
			case code == codeGone:
				c.retoken(l, w) // its ticket lapsed: queue a new one
				continue
			case code == codeLimit:
				return nil, err
			case held && ctx.Err() != nil:
				return nil, c.waitEnded(ctx, w)
			case !errors.Is(err, ErrNotAcquired):
				return nil, err
			}
			held = true
			if code == codeHeld {
				// It took the lock, but the reply came too late and the lock
				// was released: try again after the backoff.
				n = o.backoff(attempt)
			}
			c.expiresIn(w, sent, n)
			attempt++
		}
		mustAttempt = false
		if !subscribed && o.notify && !c.isPending(w) {
			subscribed = true
			if c.subscribe(ctx, l.key) {
				// A grant between the attempts (or the releases that queued
				// them) and the subscription went unheard: every waiter of
				// the key here looks again.
				c.wakeKey(w.key)
			}
		}
		if !waiting {
			waiting = true
			if obs := l.observer(); obs != nil && obs.WaitStart != nil {
				obs.WaitStart(ctx, l.key)
			}
		}

		var timer <-chan time.Time
		var t *time.Timer
		pending := c.isPending(w)
		if d, ok := c.waitTimer(w, o, attempt); ok {
			t = time.NewTimer(d)
			timer = t.C
		}
		select {
		case g := <-w.grant:
			if ctx.Err() != nil {
				// The wait ended as the lock came: leave passes it on.
				return nil, c.waitEnded(ctx, w)
			}
			if l.handed(g) {
				c.nowHolding(l)
				return l, nil
			}
			mustAttempt = true // too little of it left, or replicas to wait for: confirm
		case <-w.wake:
			mustAttempt = true
		case <-w.turn:
		case <-timer:
			// A pending waiter that a release queued meanwhile waits on.
			mustAttempt = !pending || c.stopPending(w)
		case <-ctx.Done():
			return nil, c.waitEnded(ctx, w)
		}
		if t != nil {
			t.Stop()
		}
		if c.notify.isClosed() {
			return nil, fmt.Errorf("padlock: acquire %q: %w", l.key, ErrClosed)
		}
	}
}

// waitEnded is the error of w's wait that ctx ended: what w last saw of
// its key (an attempt, or a renewal's look).
func (c *Client) waitEnded(ctx context.Context, w *waiter) error {
	c.notify.mu.Lock()
	free := w.free
	c.notify.mu.Unlock()
	if free {
		return waitError(ctx, fmt.Errorf("%w: %q was free when last looked at, but waiters queued ahead took it first or wait for more", ErrNotAcquired, w.lock.key))
	}
	return notAcquired(ctx, w.lock.key)
}

// waitTimer is how long w waits, at most, before it attempts again: a
// pending waiter until its Client's holder expires or pendingMax; a
// waiter until the holder that keeps it out expires (as far as it knows),
// or, when notifications are off, on its backoff. ok is false for no
// timer.
func (c *Client) waitTimer(w *waiter, o options, attempt int) (d time.Duration, ok bool) {
	n := &c.notify
	n.mu.Lock()
	defer n.mu.Unlock()
	if w.pending {
		if w.carried {
			return 0, false // a release in flight queues it, or wakes it
		}
		return min(pendingMax, max(time.Until(w.holdUntil), 0)), true
	}
	if !o.notify {
		d = o.backoff(attempt)
		if !w.expires.IsZero() {
			d = min(d, max(time.Until(w.expires), 0))
		}
		return d, true
	}
	if w.expires.IsZero() {
		return 0, false
	}
	return max(time.Until(w.expires), 0), true
}

// expiresIn records that what keeps w out expires ms after base (ms < 0:
// unknown), with a jitter of up to 2ms so that waiters do not all look at
// once.
func (c *Client) expiresIn(w *waiter, base time.Time, ms time.Duration) {
	c.notify.mu.Lock()
	defer c.notify.mu.Unlock()
	c.notify.expiresInLocked(w, base, ms)
}

func (n *notifier) expiresInLocked(w *waiter, base time.Time, ms time.Duration) {
	w.expires = time.Time{}
	if ms >= 0 {
		w.expires = base.Add(ms + rand.N(2*time.Millisecond))
	}
}

// waitAttempt is one attempt of w (see lua/wait.lua), and returns like
// attempt, with the script's code and its ms (the holder's remaining ttl)
// when not acquired. It queues w's ticket, or renews it.
func (c *Client) waitAttempt(ctx context.Context, l *Lock, w *waiter) (int64, time.Duration, error) {
	return c.runWait(ctx, l, w, ticketLifeFor(l.ttl))
}

// tryQueued is TryAcquire for a lock that waits in Redis but is taken by
// wait.lua (semaphores and shared holds): one attempt that queues nothing.
func (c *Client) tryQueued(ctx context.Context, l *Lock) (time.Duration, error) {
	_, d, err := c.runWait(ctx, l, nil, 0)
	return d, err
}

// runWait runs wait.lua for l with a ticket that lives life (0: a try),
// as w (nil for a try).
func (c *Client) runWait(ctx context.Context, l *Lock, w *waiter, life time.Duration) (int64, time.Duration, error) {
	mode, ticket, chosen := "new", "", ""
	if l.chosenToken() {
		chosen = "chosen"
	}
	wasSent := false
	if w != nil {
		c.notify.mu.Lock()
		if w.queued {
			mode = "keep"
		}
		wasSent = w.sent
		w.sent = true // from now on it may be in Redis, whatever the reply says
		ticket = w.ticket
		c.notify.mu.Unlock()
	} else {
		ticket = l.ticket()
	}
	sent := time.Now()
	var reply []any
	d, err := l.attemptWith(ctx, func(r doer) *redis.Cmd {
		cmd := waitScript.Run(ctx, r, l.queueKeys(), ticket, life.Milliseconds(), mode, chosen)
		reply, _ = cmd.Slice()
		return cmd
	})
	var code int64 = -1
	if len(reply) > 0 {
		code, _ = reply[0].(int64)
	}
	if len(reply) > 2 {
		c.deliver(reply[2:], sent, false)
	}
	switch {
	case code == codeLimit:
		if w != nil && mode == "new" && chosen == "" && !wasSent {
			// Refused before it wrote a ticket: there is nothing to leave.
			c.notify.mu.Lock()
			w.sent = false
			c.notify.mu.Unlock()
		}
		stored, _ := reply[1].(int64)
		return code, 0, fmt.Errorf("%w: WithLimit(%d) on %q, whose holders and waiters use WithLimit(%d)", ErrInvalid, l.counted().limit, l.key, stored)
	case code == codeGone:
		return code, 0, fmt.Errorf("%w: %q: the ticket is gone", ErrNotAcquired, l.key)
	case (code == codeWait || code == codeBehind) && w != nil && life > 0:
		c.queued(w, sent)
		c.notify.mu.Lock()
		w.free = code == codeBehind
		c.notify.mu.Unlock()
	}
	return code, d, err
}

// handed records a grant of l. It reports whether l may be returned as it
// is; if not (too little of its validity is left, counted from g.base, or
// it must wait for replicas), an attempt must confirm it. (A grant to a
// chosen token is not handed: see grantLocked.)
func (l *Lock) handed(g grant) bool {
	if g.base.IsZero() || l.replicaCount() > 0 {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fence, l.sent = g.fence, g.base
	l.took(g.base)
	l.acqCmd = nil
	return time.Until(l.deadline()) >= l.ttl*minValidity/100
}

// leave takes the waiting l out of its queues in Redis, for good, and
// passes on what was granted to it meanwhile, unless keep (see
// lua/leave.lua). It is best effort, on a context of its own: a waiter
// left behind costs the others at most its ticket's life, and a lock
// granted to it its ttl.
func (l *Lock) leave(ctx context.Context, keep bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lateCleanupTimeout)
	defer cancel()
	sent := time.Now()
	what := "pass"
	if keep {
		what = "keep"
	}
	reply, err := leaveScript.Run(ctx, l.c.rdb, l.queueKeys(), l.ticket(), goneLife.Milliseconds(), what).Slice()
	if err == nil && len(reply) > 1 {
		l.c.deliver(reply[1:], sent, false)
	}
}

// releaseQueued is the release, on r, of a lock whose waiters queue in
// Redis: it queues this Client's pending waiters for the key first, and
// serves the queue (see lua/release.lua, lua/count_release.lua). It
// returns like releaseOn.
func (l *Lock) releaseQueued(ctx context.Context, r doer, bg, undo bool) (int64, error) {
	c := l.c
	life := ticketLifeFor(l.ttl).Milliseconds()
	regs, carried := c.takePending(l)
	sent := time.Now()
	var res any
	var err error
	flags := "" // see lua/release.lua
	switch {
	case undo:
		flags = "u"
	case l.mins() != "":
		flags = "m"
	}
	if l.counted() != nil {
		args := append([]any{l.value, l.kind(), c.notify.id, life, flags}, regs...)
		res, err = countReleaseScript.Run(ctx, r, l.queueKeys(), args...).Result()
	} else {
		if l.fenced() {
			flags += "f"
		}
		args := append([]any{l.value, c.notify.id, life, flags}, regs...)
		res, err = releaseScript.Run(ctx, r, l.queueKeys(), args...).Result()
	}
	if err != nil {
		c.carriedBack(carried, time.Time{})
		return 0, err
	}
	// An integer reply: the script stopped before it queued anyone (not
	// ours, or nobody waits); an array: it served the queue, and queued the
	// pending waiters, unless the holder of a semaphore or shared hold was
	// not ours ({0}).
	var ours int64
	var grants []any
	applied := false
	switch v := res.(type) {
	case int64:
		ours = v
	case []any:
		if len(v) > 0 {
			ours, _ = v[0].(int64)
			grants = v[1:]
		}
		applied = l.counted() == nil || ours == 1
	}
	if applied {
		c.carriedBack(carried, sent)
	} else {
		c.carriedBack(carried, time.Time{})
	}
	c.deliver(grants, sent, bg)
	return ours, nil
}

// A Client's side of waiting. The waiters below are under the notifier's
// mu.

// addWaiter adds a waiter for l at the tail of its key's queue in this
// Client; it is pending if a Lock of the Client that got the key by
// waiting holds it.
func (c *Client) addWaiter(l *Lock) (*waiter, error) {
	w := &waiter{key: l.key, lock: l, obs: l.observer(), wake: make(chan struct{}, 1), turn: make(chan struct{}, 1),
		grant: make(chan grant, 1)}
	if m := l.multi(); m != nil {
		w.key = m[0]
	}
	q, err := c.queueFor(w.key)
	if err != nil {
		return nil, err
	}
	n := &c.notify
	defer n.mu.Unlock()
	w.token, w.ticket = l.tok(), l.ticket()
	if n.tokens[w.token] != nil { // only with WithToken
		if len(q.waiters) == 0 && len(q.holders) == 0 {
			delete(n.queues, w.key) // made by queueFor for this call
		}
		return nil, fmt.Errorf("%w: another Acquire with token %q waits in this Client", ErrInvalid, w.token)
	}
	q.waiters = append(q.waiters, w)
	if n.tokens == nil {
		n.tokens = make(map[string]*waiter)
	}
	n.tokens[w.token] = w
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
// ticket; unless acquired, its Lock does not hold the key. It reports
// whether w may have a ticket (or a grant) in Redis, which it must leave,
// and whether a reply showed it queued there.
func (c *Client) removeWaiter(w *waiter, acquired bool) (inRedis, queued bool) {
	n := &c.notify
	n.mu.Lock()
	w.removed = true
	inRedis, queued = w.sent || w.queued || w.carried, w.queued
	ls := w.lease
	w.lease = nil
	delete(n.tokens, w.token)
	if q := n.queues[w.key]; q != nil && !acquired {
		delete(q.holders, w.lock)
	}
	c.dequeueLocked(w, false)
	n.mu.Unlock()
	if ls != nil {
		c.sched.remove(ls)
	}
	return inRedis, queued
}

// wakeKey wakes every waiter of key in this Client to attempt.
func (c *Client) wakeKey(key string) {
	c.notify.mu.Lock()
	defer c.notify.mu.Unlock()
	if q := c.notify.queues[key]; q != nil {
		for _, w := range q.waiters {
			signal(w.wake)
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
	if l.multi() != nil {
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
// waiters, now carried by it; l no longer holds the key here.
func (c *Client) takePending(l *Lock) ([]any, []*waiter) {
	n := &c.notify
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
	if l.multi() != nil {
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
			c.queued(w, sent)
		}
	}
}

// queued records that a call sent at sent found or made w's ticket in
// Redis, and keeps the ticket renewed.
func (c *Client) queued(w *waiter, sent time.Time) {
	n := &c.notify
	n.mu.Lock()
	if w.removed {
		n.mu.Unlock()
		return
	}
	w.queued = true
	if sent.After(w.alive) {
		w.alive = sent
	}
	var fresh *lease
	if w.lease == nil {
		fresh = &lease{l: w.lock, w: w, ttl: ticketLifeFor(w.lock.ttl), sent: sent}
		w.lease = fresh
	}
	n.mu.Unlock()
	if fresh == nil {
		return
	}
	c.sched.add(fresh)
	n.mu.Lock()
	gone := w.removed || w.lease != fresh
	n.mu.Unlock()
	if gone {
		c.sched.remove(fresh) // it stopped waiting meanwhile
	}
}

// retoken gives l, whose ticket lapsed (or whose grant was lost before it
// was confirmed), a new token, so that a late word of the old one is not
// taken for a new grant, and a ticket of its own again.
func (c *Client) retoken(l *Lock, w *waiter) {
	n := &c.notify
	n.mu.Lock()
	delete(n.tokens, w.token)
	ls := w.lease
	w.lease, w.queued, w.sent, w.alive = nil, false, false, time.Time{}
	n.mu.Unlock()
	if ls != nil {
		c.sched.remove(ls)
	}
	if !l.chosenToken() { // a chosen token stays: a grant to it is confirmed (see grantLocked)
		tok := l.tok()
		prefix := tok[:strings.LastIndexByte(tok, '/')+1] // a leadership's "leader/"; random tokens have no '/'
		l.value = prefix + newToken() + l.value[len(tok):]
		l.args[0] = l.value
	}
	n.mu.Lock()
	w.token, w.ticket = l.tok(), l.ticket()
	n.tokens[w.token] = w
	n.mu.Unlock()
}

// deliver hands the grants of a reply (token, fence pairs) to this
// Client's waiters, counted from base, a moment before the grant; bg as
// for Client.observe (the observer's HandOff, then the grant, run on the
// Client's observer goroutine).
func (c *Client) deliver(grants []any, base time.Time, bg bool) {
	n := &c.notify
	var handed []func()
	n.mu.Lock()
	for i := 0; i+1 < len(grants); i += 2 {
		tok, _ := grants[i].(string)
		fence, _ := grants[i+1].(int64)
		if f := n.grantLocked(tok, grant{fence: fence, base: base}); f != nil {
			handed = append(handed, f)
		}
	}
	n.mu.Unlock()
	for _, f := range handed {
		c.observe(bg, f)
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
	if g.fence < 0 {
		// A hint: it is first in line, and the holder expires in
		// -1 - fence ms.
		n.expiresInLocked(w, time.Now(), time.Duration(-1-g.fence)*time.Millisecond)
		signal(w.turn)
		return nil
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

// parseGrant parses a message of a grant, "<token> <fence>".
func parseGrant(msg string) (tok string, fence int64, ok bool) {
	tok, f, ok := strings.Cut(msg, " ")
	if !ok {
		return "", 0, false
	}
	fence, err := strconv.ParseInt(f, 10, 64)
	return tok, fence, err == nil
}

// handChannel is the channel on which a grant is announced to the Client
// named id, for key: a side key's name (see sideKey), so that it shares
// key's Cluster slot and ACL prefix. Only that Client listens.
func handChannel(key, id string) string {
	return sideKey(key, "to:"+id)
}

// renewTickets renews the tickets of waiting leases in one pipeline, and
// settles each: renewed, gone (granted, or lapsed: its waiter attempts),
// or to retry.
func (s *scheduler) renewTickets(ctx context.Context, leases []*lease) {
	n := &s.c.notify
	type renewal struct {
		ls  *lease
		cmd *redis.BoolCmd
	}
	rs := make([]renewal, 0, len(leases))
	sent := time.Now()
	looks := s.c.keyLooks(leases)
	_, _ = s.c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		looks.send(ctx, p)
		queues := map[string]bool{}
		for _, ls := range leases {
			n.mu.Lock()
			tok := ls.w.token
			n.mu.Unlock()
			keys := ls.l.queueKeys()
			rs = append(rs, renewal{ls, p.PExpire(ctx, ls.l.ticketKey(tok), ls.ttl)})
			for i := 1; i < len(keys); i += 2 {
				if !queues[keys[i]] {
					queues[keys[i]] = true
					p.PExpire(ctx, keys[i], queueLife)
				}
			}
		}
		return nil
	})
	looks.wakeFreed(s.c, looks.look(ctx, s.c.rdb))
	for _, r := range rs {
		ok, err := r.cmd.Result()
		switch {
		case err == nil && ok:
			s.c.queued(r.ls.w, sent)
			s.mu.Lock()
			if sent.After(r.ls.sent) {
				r.ls.sent, r.ls.retryAt, r.ls.err = sent, time.Time{}, nil
			}
			s.mu.Unlock()
		case err == nil:
			s.c.ticketGone(r.ls)
		default:
			s.mu.Lock()
			r.ls.err, r.ls.retryAt = err, time.Now().Add(max(r.ls.ttl/16, time.Millisecond))
			s.mu.Unlock()
		}
	}
}

// ticketGone handles a ticket that is no longer in Redis (granted, or
// skipped): its renewals stop, and its waiter attempts, which tells.
func (c *Client) ticketGone(ls *lease) {
	c.sched.remove(ls)
	n := &c.notify
	n.mu.Lock()
	if ls.w.lease == ls {
		ls.w.lease = nil
	}
	n.mu.Unlock()
	signal(ls.w.wake)
}

// channels are the channels a Client listens on for key: its own channel
// for the key on the one way to wait, or the key's own on the attempt path
// (see notify.go).
func (c *Client) channels(key string) []string {
	if c.nodes != nil || !queueable(key) {
		return []string{key}
	}
	return []string{handChannel(key, c.notify.id)}
}
