package padlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"
)

// Direct hand-off.
//
// Waiters of a lock whose key can have side keys queue in Redis with what
// they would set (value, ttl, whether fenced; see lua/handoff.lua), and a
// release sets the key for the first of them in the same round trip. A
// waiter of the releasing Client learns it from the release's reply and
// returns with no round trip of its own; a waiter elsewhere learns it from
// the notification "<token> <fence>". The lock's validity then counts from
// a moment known to be before the hand-off: the release's send time, or
// when the waiter was first sent to Redis; if that leaves too little of the
// ttl, the waiter confirms with one round trip (wait.lua finds the lock
// its own and renews it).
//
// A Client queues its waiters for a key together: an arriving waiter is
// queued by its own first attempt, or, while another Lock of the Client
// holds the key, by that Lock's release. The first of them (the driver)
// also keeps a timer, in case a notification is lost or the holder dies:
// its attempt renews every waiter's registration (they lapse after
// waiterLife), finds a lock handed to one of them, or hands on a lock
// that expired.

// waiterLife is how long a waiter's registration in Redis lasts unless
// renewed; renewEvery is how often its Client renews it, at the least.
const (
	waiterLife = time.Second
	renewEvery = 300 * time.Millisecond
)

// minFallback is the shortest wait of a queued waiter's timer with
// notifications on: a release hands the lock over by itself, so the timer
// is for lost notifications and dead holders only, and need not poll as
// fast as a short backoff would.
const minFallback = 50 * time.Millisecond

// goneLife is how long Redis remembers that a token took the lock, so that
// a call sent before, which would queue it again, is ignored when it runs
// (see lua/handoff.lua): longer than go-redis's default timeouts let a
// call wait before it is sent.
const goneLife = 10 * time.Second

// A handoff tells a waiter that the lock was handed to it: with fence, at
// a moment after base.
type handoff struct {
	fence int64
	base  time.Time
}

var fencedArgs = [2]any{"0", "1"}

// handKeys are the keys of the scripts that hand the lock on: the lock,
// its queue, its fencing counter (whether or not this lock is fenced: a
// waiter may be), its waiters' details and the tokens that took it.
func (l *Lock) handKeys() []string {
	return []string{l.key, l.sideName(0), l.sideName(1), l.sideName(2), l.sideName(3)}
}

// queueWaiting is Acquire for a lock whose waiters queue in Redis, with
// notifications on: see Direct hand-off above.
func (c *Client) queueWaiting(ctx context.Context, l *Lock, o options) (_ *Lock, err error) {
	w, head, holder, err := c.enqueueHand(l)
	if err != nil {
		return nil, opError("acquire", l.key, err)
	}
	defer func() {
		if err != nil && c.everSent(w) {
			l.leave(ctx, w)
		}
		c.dequeue(w, err == nil)
	}()
	waiting := false // whether the observer was told this call waits
	if obs := l.observer(); obs != nil {
		defer func() {
			if waiting && obs.WaitDone != nil {
				obs.WaitDone(ctx, l.key)
			}
		}()
	}
	held := holder       // whether the lock was found held: only then is a timeout contention
	mustAttempt := !held // a Lock of ours holds it: its release queues us
	confirm := false     // the next attempt confirms a hand-off
	driver := head
	subscribed := false
	for attempt := 0; ; {
		pttl := time.Duration(-1)
		if mustAttempt {
			if err := ctx.Err(); err != nil {
				if held {
					return nil, notAcquired(ctx, l.key)
				}
				return nil, opError("acquire", l.key, err)
			}
			pttl, err = c.queueAttempt(ctx, l, w, confirm)
			switch {
			case err == nil:
				c.nowHolding(l)
				return l, nil
			case held && ctx.Err() != nil:
				return nil, notAcquired(ctx, l.key)
			case !errors.Is(err, ErrNotAcquired):
				return nil, err
			}
			if confirm {
				// The lock handed to us was lost before we confirmed it:
				// wait again, under a new token (see rejoin).
				confirm = false
				driver = c.rejoin(l, w)
			}
			held = true
			attempt++
		}
		if !subscribed && o.notify {
			subscribed = true
			if c.subscribe(ctx, l.key) && mustAttempt {
				// A hand-off between our attempt and the subscription
				// would go unheard: look once more.
				continue
			}
		}
		mustAttempt = false
		if !waiting {
			waiting = true
			if obs := l.observer(); obs != nil && obs.WaitStart != nil {
				obs.WaitStart(ctx, l.key)
			}
		}

		var timer <-chan time.Time
		var t *time.Timer
		if driver {
			d := min(waitTime(o.backoff, attempt, pttl), renewEvery)
			if o.notify {
				d = max(d, minFallback)
			}
			t = time.NewTimer(min(d, c.renewDue(l.key)))
			timer = t.C
		}
		select {
		case h := <-w.hand:
			if ctx.Err() != nil {
				// The wait ended as the lock came: pass it on (see leave).
				return nil, notAcquired(ctx, l.key)
			}
			if l.handed(h) {
				c.nowHolding(l)
				return l, nil
			}
			mustAttempt, confirm = true, true
		case <-w.turn:
			driver = true
		case <-w.wake:
			mustAttempt = true
		case <-timer:
			mustAttempt = true
		case <-ctx.Done():
			return nil, notAcquired(ctx, l.key)
		}
		if t != nil {
			t.Stop()
		}
		if c.notify.isClosed() {
			return nil, fmt.Errorf("padlock: acquire %q: %w", l.key, ErrClosed)
		}
	}
}

// queueAttempt is one attempt of a queued waiter (see wait.lua), which
// also queues this Client's waiters for the key (see registrations),
// except when it confirms a hand-off. It returns like attempt. When it
// finds the lock handed to another waiter of this Client, it tells that
// waiter.
func (c *Client) queueAttempt(ctx context.Context, l *Lock, w *waiter, confirm bool) (time.Duration, error) {
	sent := time.Now()
	var regs []any
	var ws []*waiter
	if !confirm {
		regs, ws = c.registrations(l.key, sent)
	}
	args := make([]any, 0, 5+len(regs))
	args = append(args, l.args[0], l.args[1], l.tok(), fencedArgs[b2i(l.fenced())], c.notify.idArg)
	args = append(args, regs...)
	var reply []any
	d, err := l.attemptWith(ctx, func(r doer) *redis.Cmd {
		cmd := waitScript.Run(ctx, r, l.handKeys(), args...)
		reply, _ = cmd.Slice()
		return cmd
	})
	if err == nil || errors.Is(err, ErrNotAcquired) {
		c.registered(ws)
	}
	if err == nil && !confirm && len(reply) == 3 {
		// It found the lock handed to it (word of that may come too).
		c.notify.mu.Lock()
		c.notify.handOffLocked(w)
		c.notify.mu.Unlock()
	}
	if errors.Is(err, ErrNotAcquired) && len(reply) == 5 {
		holder, _ := reply[2].(string)
		fence, _ := reply[3].(int64)
		if now, _ := reply[4].(int64); now == 1 {
			c.deliver(l.key, holder, handoff{fence: fence, base: sent}, false)
		} else {
			// Handed to it earlier, and word of that lost (or on its
			// way): with no base, it confirms, which gives the fence.
			c.deliver(l.key, holder, handoff{}, false)
		}
	}
	return d, err
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// handed records a hand-off of l. It reports whether l may be returned as
// it is; if not (too little of its validity is left, counted from h.base,
// or it must wait for replicas), an attempt must confirm it.
func (l *Lock) handed(h handoff) bool {
	if h.base.IsZero() || l.replicaCount() > 0 {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fence, l.sent = h.fence, h.base
	l.acqCmd = nil
	return time.Until(l.deadline()) >= l.ttl*minValidity/100
}

// The side keys of a Lock as command arguments: views of the Lock that
// go-redis writes through encoding.BinaryMarshaler, so that a release
// boxes no string per key (each would allocate). Not for the first key,
// which go-redis reads as a string to route the command.
type (
	queueArg   Lock
	fenceArg   Lock
	waitersArg Lock
	tookArg    Lock
)

func (a *queueArg) MarshalBinary() ([]byte, error)   { return sideBytes((*Lock)(a), 0), nil }
func (a *fenceArg) MarshalBinary() ([]byte, error)   { return sideBytes((*Lock)(a), 1), nil }
func (a *waitersArg) MarshalBinary() ([]byte, error) { return sideBytes((*Lock)(a), 2), nil }
func (a *tookArg) MarshalBinary() ([]byte, error)    { return sideBytes((*Lock)(a), 3), nil }
func (a *queueArg) String() string                   { return (*Lock)(a).sideName(0) }
func (a *fenceArg) String() string                   { return (*Lock)(a).sideName(1) }
func (a *waitersArg) String() string                 { return (*Lock)(a).sideName(2) }
func (a *tookArg) String() string                    { return (*Lock)(a).sideName(3) }

// sideBytes is side key i of l, as bytes that share its memory: go-redis
// only writes them out.
func sideBytes(l *Lock, i int) []byte {
	name := l.sideName(i)
	return unsafe.Slice(unsafe.StringData(name), len(name))
}

// releaseHanding is the release of a lock whose waiters queue in Redis,
// on r: it queues this Client's waiters for the key that are not queued
// yet, and hands the lock to the first waiter (see release.lua), telling
// it if it is ours. It returns like releaseOn.
func (l *Lock) releaseHanding(ctx context.Context, r doer) (int64, error) {
	c := l.c
	sent := time.Now()
	regs, ws := c.registrations(l.key, sent)
	cmd := make([]any, 0, 11+len(regs))
	cmd = append(cmd, "evalsha", releaseSHA, numKeys[5], l.key,
		(*queueArg)(l), (*fenceArg)(l), (*waitersArg)(l), (*tookArg)(l), l.args[0], graceArg, c.notify.idArg)
	cmd = append(cmd, regs...)
	res, err := evalsha(ctx, r, releaseScript, cmd).Result()
	if err != nil {
		return 0, err
	}
	switch v := res.(type) {
	case int64:
		if v == 1 {
			c.released(l, ws)
		}
		return v, nil
	case []any:
		if len(v) == 2 {
			c.released(l, ws)
			tok, _ := v[0].(string)
			fence, _ := v[1].(int64)
			c.deliver(l.key, tok, handoff{fence: fence, base: sent}, false)
			return 1, nil
		}
	}
	return 0, fmt.Errorf("unexpected reply %v", res)
}

// leave takes a waiter that gives up out of its key's queue in Redis, and
// passes on a lock that was handed (or reserved) to it. It is best effort,
// on a context of its own: a waiter left behind costs the others at most
// its registration's life, and a lock handed to it at most its ttl.
func (l *Lock) leave(ctx context.Context, w *waiter) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lateCleanupTimeout)
	defer cancel()
	l.c.notify.mu.Lock()
	tok, value := w.token, w.value
	l.c.notify.mu.Unlock()
	_ = leaveScript.Run(ctx, l.c.rdb, l.handKeys(), tok, value, graceArg).Err()
}

// The notifier's side of hand-offs.

// enqueueHand adds a waiter for l at the tail of its key's queue. It
// reports whether it is the head, and whether a Lock of this Client holds
// the key (whose release will queue the waiter in Redis).
func (c *Client) enqueueHand(l *Lock) (w *waiter, head, holder bool, err error) {
	w = &waiter{key: l.key, obs: l.observer(), wake: make(chan struct{}, 1), turn: make(chan struct{}, 1), hand: make(chan handoff, 1), fenced: l.fenced()}
	w.setLock(l)
	q, err := c.queueFor(l.key)
	if err != nil {
		return nil, false, false, err
	}
	defer c.notify.mu.Unlock()
	q.waiters = append(q.waiters, w)
	c.notify.handing.Add(1)
	w.handing = true
	return w, len(q.waiters) == 1, q.holder != nil && time.Now().Before(q.holderUntil), nil
}

// setLock copies what the scripts need of l into w. Under the notifier's
// mu, or before w is shared.
func (w *waiter) setLock(l *Lock) {
	w.lock, w.token, w.value, w.ttl = l, l.tok(), l.value, l.ttl
	w.args = [5]any{w.token, l.args[1], fencedArgs[b2i(w.fenced)], l.c.notify.id, l.args[0]}
}

// registrations returns the arguments that queue key's waiters in Redis
// (see register in lua/handoff.lua), and the waiters they are: those not
// queued yet, or every one when their registrations are due for renewal
// (renewEvery after the last), whichever call carries them. A waiter
// never sent before is recorded as first sent at sent.
func (c *Client) registrations(key string, sent time.Time) ([]any, []*waiter) {
	n := &c.notify
	if n.handing.Load() == 0 {
		return nil, nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	q := n.queues[key]
	if q == nil {
		return nil, nil
	}
	var args []any
	var ws []*waiter
	all := !sent.Before(q.renewed.Add(renewEvery))
	if all {
		q.renewed = sent
	}
	for _, w := range q.waiters {
		if !w.handing || !all && w.registered {
			continue
		}
		if w.firstSent.IsZero() {
			w.firstSent = sent
		}
		args = append(args, w.args[:]...)
		ws = append(ws, w)
	}
	return args, ws
}

// registered records that ws are queued in Redis.
func (c *Client) registered(ws []*waiter) {
	if len(ws) == 0 {
		return
	}
	c.notify.mu.Lock()
	for _, w := range ws {
		w.registered = true
	}
	c.notify.mu.Unlock()
}

// released records that l was released, and that ws are queued in Redis.
func (c *Client) released(l *Lock, ws []*waiter) {
	n := &c.notify
	if n.handing.Load() == 0 {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, w := range ws {
		w.registered = true
	}
	if q := n.queues[l.key]; q != nil && q.holder == l {
		q.holder = nil
	}
}

// renewDue is how long until key's registrations are due for renewal.
func (c *Client) renewDue(key string) time.Duration {
	c.notify.mu.Lock()
	defer c.notify.mu.Unlock()
	if q := c.notify.queues[key]; q != nil {
		return max(time.Until(q.renewed.Add(renewEvery)), 0)
	}
	return 0
}

// everSent reports whether w may be queued in Redis.
func (c *Client) everSent(w *waiter) bool {
	c.notify.mu.Lock()
	defer c.notify.mu.Unlock()
	return !w.firstSent.IsZero()
}

// nowHolding records that l, one of this Client's waiters, now holds its
// key: waiters arriving meanwhile are queued in Redis by its release.
func (c *Client) nowHolding(l *Lock) {
	until := l.Deadline()
	n := &c.notify
	n.mu.Lock()
	if q := n.queues[l.key]; q != nil {
		q.holder, q.holderUntil = l, until
	}
	n.mu.Unlock()
}

// deliver tells this Client's waiter for key with token tok, if there is
// one, that the lock was handed to it; with first, the hand-off counts
// from when the waiter was first sent to Redis (h.base is ignored), and
// h.fence only if the waiter is fenced.
func (c *Client) deliver(key, tok string, h handoff, first bool) {
	n := &c.notify
	n.mu.Lock()
	defer n.mu.Unlock()
	n.deliverLocked(key, tok, h, first)
}

func (n *notifier) deliverLocked(key, tok string, h handoff, first bool) {
	q := n.queues[key]
	if q == nil {
		return
	}
	for i, w := range q.waiters {
		if w.token != tok || !w.handing {
			continue
		}
		if first {
			h.base = w.firstSent
		}
		if !w.fenced {
			h.fence = 0
		}
		q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
		n.handing.Add(-1)
		if !h.base.IsZero() {
			// Waiters arriving now are queued by its release.
			q.holder, q.holderUntil = w.lock, h.base.Add(w.ttl-drift(w.ttl))
		}
		if i == 0 && len(q.waiters) > 0 {
			signal(q.waiters[0].turn)
		}
		n.handOffLocked(w)
		select {
		case w.hand <- h:
		default:
		}
		return
	}
}

// clientIDLen is the length of a Client's name in registrations.
const clientIDLen = 8

// handChannel is the channel on which a release tells the Client named id
// that it handed key to one of its waiters: a side key's name (see
// sideKey), so that it shares key's Cluster slot and ACL prefix. Only that
// Client listens, so other clients waiting for the key are not woken.
func handChannel(key, id string) string {
	return sideKey(key, "to:"+id)
}

// channels are the channels a Client listens on for key: the key's own
// (releases announced to all) and, when its waiters queue in Redis, its
// hand-off channel.
func (c *Client) channels(key string) []string {
	if c.nodes != nil || !queueable(key) {
		return []string{key}
	}
	return []string{key, handChannel(key, c.notify.id)}
}

// handOffLocked tells w's observer, once, that the lock was handed to it.
func (n *notifier) handOffLocked(w *waiter) {
	if !w.handedOff && w.obs != nil && w.obs.HandOff != nil {
		w.handedOff = true
		w.obs.HandOff(w.key)
	}
}

// parseHandoff parses a notification of a direct hand-off, "<token>
// <fence>".
func parseHandoff(msg string) (tok string, fence int64, ok bool) {
	tok, f, ok := strings.Cut(msg, " ")
	if !ok || len(tok) != tokenLen {
		return "", 0, false
	}
	fence, err := strconv.ParseInt(f, 10, 64)
	return tok, fence, err == nil
}

// rejoin puts w, whose hand-off was lost before it was confirmed, back in
// its key's queue under a new token (a late word of the lost hand-off must
// not be taken for a new one). It reports whether w is the head.
func (c *Client) rejoin(l *Lock, w *waiter) bool {
	l.retoken()
	q, err := c.queueFor(l.key)
	if err != nil {
		return false // closed: the loop sees it
	}
	defer c.notify.mu.Unlock()
	w.setLock(l)
	w.registered, w.firstSent = false, time.Time{}
	q.waiters = append(q.waiters, w)
	c.notify.handing.Add(1)
	return len(q.waiters) == 1
}

// retoken gives l, not yet returned to its caller, a new token.
func (l *Lock) retoken() {
	meta := l.value[tokenLen:]
	l.value = newToken() + meta
	l.args[0] = l.value
}
