package padlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/padlock-go/padlock/driver"
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
//
// Redlock's locks (independent nodes cannot grant in one script) and keys
// with a brace but no hash tag (they can have no side key in their slot)
// cannot queue in Redis. They wait in the same loop, inside their Client
// only: its first waiter for the key attempts when a release is announced
// on the key's channel, when the holder would expire, or on its backoff.

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

// acquireWaiting is Acquire once its arguments are checked: it attempts,
// and waits between attempts, until l is acquired or ctx ends. The call
// takes its place in its key's queue in this Client (see addWaiter), and
// one loop serves every lock; only its step differs:
//   - a lock whose waiters queue in Redis attempts with wait.lua, which
//     queues its ticket; it is granted the lock by whatever frees it, and
//     attempts again when told to (a hint, a wake) or when it may be free;
//   - on the attempt path (Redlock, keys with a brace but no hash tag), only
//     the head of the queue in this Client attempts, with the acquire
//     script; it attempts again when a release is announced, on its
//     backoff, or when the holder would expire.
func (c *Client) acquireWaiting(ctx context.Context, l *Lock, o options) (held *Lock, _ error) {
	w, err := c.addWaiter(l)
	if err != nil {
		return nil, opError("acquire", l.key, err)
	}
	wt := &wait{c: c, l: l, w: w, o: o}
	// Not held if an observer's func panics.
	defer func() { wt.end(ctx, held != nil) }()
	mustAttempt := true // the next step is an attempt (else: a wait)
	for {
		if mustAttempt && c.mayAttempt(w) {
			got, again, err := wt.attempt(ctx)
			switch {
			case got != nil || err != nil:
				return got, err
			case again:
				continue
			}
		}
		if wt.subscribe(ctx) {
			// A grant (or a release) between the attempt and the
			// subscription went unheard: look again before waiting.
			mustAttempt = true
			continue
		}
		wt.tellWaiting(ctx)
		var got *Lock
		got, mustAttempt, err = wt.sleep(ctx)
		if got != nil || err != nil {
			return got, err
		}
	}
}

// A wait is one Acquire call that waits (see acquireWaiting).
type wait struct {
	c          *Client
	l          *Lock
	w          *waiter
	o          options
	attempts   int   // attempts that did not get the lock
	held       bool  // it found the lock held: a timeout then is contention
	subscribed bool  // it subscribed its key's channel
	waiting    bool  // its observer was told that it waits
	inFlight   error // the error of an attempt left in flight (see after), or nil
}

// attempt makes one attempt. It returns the Lock once acquired, or the
// error that ends the wait, or again: attempt at once (the ticket lapsed,
// and a new one is to be queued).
func (wt *wait) attempt(ctx context.Context) (_ *Lock, again bool, _ error) {
	c, l, w := wt.c, wt.l, wt.w
	if err := ctx.Err(); err != nil {
		if wt.held || wt.waiting { // it found the lock held, or waited for others
			return nil, false, c.waitEnded(ctx, w)
		}
		return nil, false, opError("acquire", l.key, err)
	}
	sent := time.Now()
	code, n, err := wt.step(ctx)
	if err != nil {
		l.untake()
		if unfinished(err) != nil {
			wt.inFlight = err // its leave comes after it
		}
	}
	switch {
	case err == nil:
		c.nowHolding(l)
		return l, false, nil
	case code == codeGone:
		c.retoken(l, w) // its ticket lapsed: queue a new one
		return nil, true, nil
	case code == codeLimit:
		return nil, false, err
	case wt.held && ctx.Err() != nil:
		return nil, false, c.waitEnded(ctx, w)
	case !errors.Is(err, ErrNotAcquired):
		return nil, false, err
	}
	wt.held = true
	if code == codeHeld {
		// It took the lock, but the reply came too late and the lock was
		// released: try again after the backoff.
		n = wt.o.backoff(wt.attempts)
	}
	c.expiresIn(w, sent, n)
	wt.attempts++
	return nil, false, nil
}

// step is one attempt: wait.lua for a lock whose waiters queue in Redis,
// else the acquire script (as its code would say). It returns the code,
// the time until the holder that keeps it out expires (-1 unknown), and
// nil once acquired.
func (wt *wait) step(ctx context.Context) (int64, time.Duration, error) {
	if wt.l.queued() {
		return wt.c.waitAttempt(ctx, wt.l, wt.w)
	}
	pttl, err := wt.c.attempt(ctx, wt.l)
	return codeWait, pttl, err
}

// subscribe subscribes the key's channel, once, with notifications on and
// unless a release of this Client is to queue it. It reports whether this
// call subscribed it: a grant (or a release) before then went unheard, so
// the other waiters of the key here are woken to look again, and the
// caller looks too.
func (wt *wait) subscribe(ctx context.Context) bool {
	if wt.subscribed || !wt.o.notify || wt.c.isPending(wt.w) {
		return false
	}
	wt.subscribed = true
	if !wt.c.subscribe(ctx, wt.l.key) {
		return false
	}
	wt.c.wakeKey(wt.w.key, wt.w)
	return true
}

// tellWaiting tells the observer, once, that the call waits.
func (wt *wait) tellWaiting(ctx context.Context) {
	if wt.waiting {
		return
	}
	wt.waiting = true
	if wt.o.notify {
		wt.c.watchKick()
	}
	if obs := wt.l.observer(); obs != nil && obs.WaitStart != nil {
		wt.c.notify.aside(wt.w, func() { obs.WaitStart(ctx, wt.l.key) })
	}
}

// sleep waits for what ends a wait: a grant (it returns the Lock, if it
// needs no confirming attempt), a wake, its turn, its timer, or ctx (it
// returns the error). mustAttempt says whether to attempt next.
func (wt *wait) sleep(ctx context.Context) (_ *Lock, mustAttempt bool, _ error) {
	c, l, w := wt.c, wt.l, wt.w
	var timer <-chan time.Time
	d, ok, pending := c.waitTimer(w, wt.o, wt.attempts)
	if ok {
		t := time.NewTimer(d)
		defer t.Stop()
		timer = t.C
	}
	select {
	case g := <-w.grant:
		if c.notify.isClosed() {
			break // its leave passes the lock on (see Client.Close)
		}
		if ctx.Err() != nil {
			// The wait ended as the lock came: leave passes it on.
			return nil, false, c.waitEnded(ctx, w)
		}
		if l.handed(g) {
			c.nowHolding(l)
			return l, false, nil
		}
		mustAttempt = true // too little of it left, or replicas to wait for: confirm
	case <-w.wake:
		mustAttempt = true
	case <-w.turn:
	case <-timer:
		// A pending waiter that a release queued meanwhile waits on.
		mustAttempt = !pending || c.stopPending(w)
		if pending && mustAttempt && wt.o.notify {
			c.watchKick() // pending no more: the watch looks for it now
		}
	case <-ctx.Done():
		return nil, false, c.waitEnded(ctx, w)
	}
	if c.notify.isClosed() {
		return nil, false, fmt.Errorf("padlock: acquire %q: %w", l.key, ErrClosed)
	}
	return nil, mustAttempt, nil
}

// end takes the call out of its queues, here and (if it did not get the
// lock) in Redis, or has Close do it, and tells the observer that it
// stopped waiting.
func (wt *wait) end(ctx context.Context, acquired bool) {
	if d := wt.c.removeWaiter(wt.w, acquired); d != nil {
		wt.c.after(ctx, wt.inFlight, func(ctx context.Context) { d.l.leave(ctx, d.ticket, d.keep) })
	}
	wt.c.notify.ended()
	if obs := wt.l.observer(); wt.waiting && obs != nil && obs.WaitDone != nil {
		obs.WaitDone(ctx, wt.l.key)
	}
}

// ended counts a waiter out of busy once it has ended (and sent its
// leave, if it had one to send).
func (n *notifier) ended() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.notBusyLocked()
}

func (n *notifier) notBusyLocked() {
	n.busy--
	if n.busy == 0 && n.idle != nil {
		close(n.idle)
		n.idle = nil
	}
}

// aside runs f, w's observer's WaitStart, on w's goroutine, which Close
// does not wait for meanwhile: f may close the Client. Close leaves, for
// such a waiter, what it has in Redis (see closeWaiters). If f panics, w
// is busy again as it ends.
func (n *notifier) aside(w *waiter, f func()) {
	n.mu.Lock()
	w.aside = true
	n.notBusyLocked()
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		w.aside = false
		n.busy++
		n.mu.Unlock()
	}()
	f()
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
// timer; pending says whether w waits for a release of its Client.
func (c *Client) waitTimer(w *waiter, o options, attempt int) (d time.Duration, ok, pending bool) {
	polls := !o.notify || !w.lock.queued() // on its backoff (see below)
	backoff := time.Duration(0)
	if polls {
		backoff = o.backoff(attempt) // the caller's function: not under mu
	}
	n := &c.notify
	n.mu.Lock()
	defer n.mu.Unlock()
	if w.pending {
		if w.carried {
			return 0, false, true // a release in flight queues it, or wakes it
		}
		return min(pendingMax, max(time.Until(w.holdUntil), 0)), true, true
	}
	if polls {
		// Notifications are off, or on the attempt path (a release is
		// announced, not granted), where only the head of the queue here
		// attempts.
		if q := n.queues[w.key]; !w.lock.queued() && (q == nil || q.waiters[0] != w) {
			return 0, false, false
		}
		d = backoff
		if !w.expires.IsZero() {
			d = min(d, max(time.Until(w.expires), 0))
		}
		return d, true, false
	}
	if w.expires.IsZero() {
		return 0, false, false
	}
	return max(time.Until(w.expires), 0), true, false
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
	mode, ticket, chosen := waitNew, "", ""
	if l.chosenToken() {
		chosen = waitChosen
	}
	wasSent := false
	if w != nil {
		c.notify.mu.Lock()
		if w.queued {
			mode = waitKeep
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
	d, err := l.attemptWith(ctx, func(r doer) (any, error) {
		v, err := waitScript.Run(ctx, r, l.queueKeys(), ticket, life.Milliseconds(), mode, chosen)
		reply, _ = v.([]any)
		return v, err
	})
	var code int64 = -1
	if len(reply) > 0 {
		code, _ = reply[0].(int64)
	}
	c.deliver(readNews(reply, 2), sent, false)
	switch {
	case code == codeLimit:
		if w != nil && mode == waitNew && chosen == "" && !wasSent {
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
		c.queued(w, sent, nil)
		c.notify.mu.Lock()
		w.free = code == codeBehind
		c.notify.mu.Unlock()
	}
	return code, d, err
}

// handed records a grant of l, which arrived now: its validity and its
// minimum count from g.base, a moment before the grant, and its
// WithMaxHold from now. It reports whether l may be returned as it is; if
// not (too little of its validity is left, or it must wait for replicas),
// an attempt must confirm it. (A grant to a chosen token is not handed:
// see grantLocked.)
func (l *Lock) handed(g grant) bool {
	if g.base.IsZero() || l.replicaCount() > 0 {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fence, l.sent = g.fence, g.base
	l.took(g.base, time.Now(), l.minHold())
	l.acqCmd = nil
	return time.Until(l.deadline()) >= l.ttl/100*minValidity
}

// leave takes the waiting l, whose ticket is ticket, out of its queues in
// Redis, for good, and passes on what was granted to it meanwhile, unless
// keep (see lua/leave.lua). It is best effort, on a context of its own: a
// waiter left behind costs the others at most its ticket's life, and a lock
// granted to it its ttl.
func (l *Lock) leave(ctx context.Context, ticket string, keep bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lateCleanupTimeout)
	defer cancel()
	sent := time.Now()
	reply, err := asSlice(leaveScript.Run(ctx, l.c.d, l.queueKeys(), leaveArgs(ticket, keep)...))
	if err == nil {
		l.c.deliver(readNews(reply, 1), sent, false)
	}
}

func leaveArgs(ticket string, keep bool) []any {
	what := leavePass
	if keep {
		what = leaveKeep
	}
	return []any{ticket, goneLife.Milliseconds(), what}
}

// A departure is what a waiter that gives up leaves in Redis (see
// Lock.leave).
type departure struct {
	l      *Lock
	ticket string
	keep   bool // a chosen token that no reply has shown waiting may have held the key before: what it holds stays
}

// depart sends the leaves of the waiters that ended as the Client closed
// in one pipeline (a round trip per node; and one more, as EVAL, for a
// server that lacks the script), best effort as leave's, until until (or
// for lateCleanupTimeout, if that is later).
func (c *Client) depart(ds []departure, until time.Time) {
	if len(ds) == 0 {
		return
	}
	until = latest(until, time.Now().Add(lateCleanupTimeout))
	ctx, cancel := context.WithDeadline(context.Background(), until)
	defer cancel()
	d := c.d // bounded: Close returns by until, whatever Redis does
	sent := time.Now()
	cmds := make([]driver.Cmd, len(ds))
	for i, d := range ds {
		cmds[i] = leaveScript.batched(d.l.queueKeys(), leaveArgs(d.ticket, d.keep), false)
	}
	d.Batch(ctx, cmds)
	if again := noScripts(cmds); len(again) > 0 {
		for _, i := range again {
			cmds[i] = leaveScript.batched(ds[i].l.queueKeys(), leaveArgs(ds[i].ticket, ds[i].keep), true)
		}
		batchSome(ctx, d, cmds, again)
	}
	for _, cmd := range cmds {
		if reply, err := asSlice(cmd.Reply, cmd.Err); err == nil {
			c.deliver(readNews(reply, 1), sent, false)
		}
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
	flags := ""
	switch {
	case undo:
		flags = releaseUndo
	case l.mins() != "":
		flags = releaseMin
	}
	if l.counted() != nil {
		args := append([]any{l.value, l.kind(), c.notify.id, life, flags}, regs...)
		res, err = countReleaseScript.Run(ctx, r, l.queueKeys(), args...)
	} else {
		if l.fenced() {
			flags += releaseFenced
		}
		args := append([]any{l.value, c.notify.id, life, flags}, regs...)
		res, err = releaseScript.Run(ctx, r, l.queueKeys(), args...)
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
	var nw news
	applied := false
	switch v := res.(type) {
	case int64:
		ours = v
	case []any:
		if len(v) > 0 {
			ours, _ = v[0].(int64)
			nw = readNews(v, 1)
		}
		applied = l.counted() == nil || ours == 1
	}
	if applied {
		c.carriedBack(carried, sent)
	} else {
		c.carriedBack(carried, time.Time{})
	}
	c.deliver(nw, sent, bg)
	return ours, nil
}

// A Client's side of waiting. The waiters below are under the notifier's
// mu.
