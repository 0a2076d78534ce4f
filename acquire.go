package padlock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/padlock-go/padlock/driver"
)

// TryAcquire makes one attempt to take the lock key for ttl, in one round
// trip. It does not wait.
//
// On success it returns the Lock, which the caller must Release (or let
// expire). If another holder has the lock, it returns an error that matches
// ErrNotAcquired; so it does if the reply came back so late that less than
// a tenth of the ttl was left of the lock's validity (see Deadline): such a
// lock is released, never handed out. Bad input returns ErrInvalid without touching Redis; a
// Redis or context error is returned wrapped, never as ErrNotAcquired. A
// failed call never leaves the lock held: when the outcome of the attempt is
// unknown (a lost reply), TryAcquire deletes what it may have taken before
// returning, or, if ctx ended while the attempt was in flight, in the
// background once the Redis client is done with it, so that the delete
// cannot overtake the attempt (unless the token was chosen with WithToken:
// see there). TryAcquire returns by ctx's deadline whatever Redis does.
//
// ttl is rounded up to whole milliseconds, the resolution Redis keeps; a
// ttl under 1ms or over about 292 years (the largest whole number of
// milliseconds a time.Duration holds) is ErrInvalid. On a closed Client
// it returns ErrClosed and makes no round trip (see Close).
func (c *Client) TryAcquire(ctx context.Context, key string, ttl time.Duration, opts ...Option) (*Lock, error) {
	l, _, err := c.newLock(ctx, key, ttl, opts)
	if err != nil {
		return nil, err
	}
	if l.observer() != nil {
		return c.holding(observeAcquire(ctx, l, false, c.tryAcquire))
	}
	return c.holding(c.tryAcquire(ctx, l))
}

// tryAcquire is TryAcquire (and TryAcquireMany) once l is built.
func (c *Client) tryAcquire(ctx context.Context, l *Lock) (*Lock, error) {
	if err := ctx.Err(); err != nil {
		return nil, opError("acquire", l.lockName(), err)
	}
	if _, err := c.attempt(ctx, l); err != nil {
		if err == ErrNotAcquired {
			if m := l.multi(); m != nil {
				return nil, fmt.Errorf("%w: one of %q is held", ErrNotAcquired, m)
			}
			return nil, fmt.Errorf("%w: %q is held", ErrNotAcquired, l.key)
		}
		return nil, err
	}
	return l, nil
}

// lockName is how errors name l: its key, or its keys.
func (l *Lock) lockName() any {
	if m := l.multi(); m != nil {
		return m
	}
	return l.key
}

// Acquire takes the lock key for ttl, waiting while someone else holds it,
// until it succeeds or ctx is done. It blocks.
//
// It does not poll: it queues behind earlier waiters (of this Client, and
// of other Clients through Redis), and the release that ends the wait sets
// the lock for it in the same round trip (see the package documentation;
// the returned Lock's Deadline counts from before that release). Redis is
// the truth: a key freed by anything else (a DEL by hand, another
// library's release, eviction, a shortened or missing TTL) is noticed
// within a ticket renewal (2.5s for a ttl of 5s or more, ttl/2 below) by
// its Client, which serves the queue. It also looks when the holder's lock
// expires, and, with notifications off (WithoutNotifications) or on
// Redlock, after the backoff (WithBackoff). If ctx ends just as the
// lock is handed to it, it passes the lock on to the next waiter and
// returns the ctx error. The same token is used for every attempt (unless
// its ticket lapsed while it waited: it queues again under a new one), so
// an attempt whose reply was lost and is tried again finds its own lock
// and succeeds.
//
// On success it returns the Lock. When ctx ends while it waits for another
// holder, it returns an error that matches both ErrNotAcquired and
// ctx.Err(); when the Client is closed (before the call, with no round
// trip, or while it waits), one that matches ErrClosed. Bad input
// returns ErrInvalid (a ttl as TryAcquire's); a Redis error (or ctx ending
// before any attempt found the lock held) ends the call at once and is
// returned wrapped, never as ErrNotAcquired: an outage is not contention. A
// failed call never leaves the lock held (unless the token was chosen with
// WithToken: see there).
func (c *Client) Acquire(ctx context.Context, key string, ttl time.Duration, opts ...Option) (*Lock, error) {
	l, o, err := c.newLock(ctx, key, ttl, opts)
	if err != nil {
		return nil, err
	}
	return c.holding(c.acquireObserved(ctx, l, o))
}

// acquireObserved is acquireWaiting, between the observer's calls if l has
// an observer.
func (c *Client) acquireObserved(ctx context.Context, l *Lock, o options) (*Lock, error) {
	if l.observer() == nil {
		return c.acquireWaiting(ctx, l, o)
	}
	return observeAcquire(ctx, l, true, func(ctx context.Context, l *Lock) (*Lock, error) {
		return c.acquireWaiting(ctx, l, o)
	})
}

// notAcquired is Acquire's error when ctx ended first: it matches
// ErrNotAcquired, ctx.Err() and, if ctx has one, its cause.
func notAcquired(ctx context.Context, key string) error {
	return waitError(ctx, fmt.Errorf("%w: %q held by another holder when last looked at", ErrNotAcquired, key))
}

// waitError is err, which says why a wait ended without the lock, joined
// with ctx's error and cause.
func waitError(ctx context.Context, err error) error {
	err = fmt.Errorf("%w: %w", err, ctx.Err())
	if cause := context.Cause(ctx); cause != ctx.Err() {
		err = errors.Join(err, cause)
	}
	return err
}

// newLock checks the arguments of an acquire call and builds the Lock it
// would return, with a fresh token. It makes no round trip.
func (c *Client) newLock(ctx context.Context, key string, ttl time.Duration, opts []Option) (*Lock, options, error) {
	o := c.defaults()
	if len(opts) > 0 {
		o = o.with(opts)
	}
	ttl, err := c.check(ctx, key, ttl)
	if err != nil {
		return nil, o, err
	}
	if err := c.open("acquire", key); err != nil {
		return nil, o, err
	}
	if o, err = o.checkHold(key); err != nil {
		return nil, o, err
	}
	if err := o.checkReplicas(); err != nil {
		return nil, o, err
	}
	if err := c.checkRedlock(o); err != nil {
		return nil, o, err
	}
	l := &Lock{c: c, key: key, ttl: ttl}
	if o.replicas > 0 || o.obs != nil || o.maxHoldSet || o.minHoldSet || c.nodes != nil {
		l.x = &lockExtra{replicas: o.replicas, replicaTimeout: o.replicaTimeout, obs: o.obs, maxHold: o.maxHold, minHold: o.minHold}
	}
	if c.nodes != nil {
		l.x.turns = &turnState{busy: make([]chan struct{}, len(c.nodes)), next: make([]chan struct{}, len(c.nodes))}
	}
	l.keys[0] = key
	if o.fencing && !queueable(key) {
		return nil, o, fmt.Errorf("%w: fencing needs a key with a hash tag or without braces, got %q", ErrInvalid, key)
	}
	if queueable(key) {
		if c.nodes == nil { // a Redlock's waiters queue only in their Client
			l.keys[1] = sideKey(key, "queue")
		}
		if o.fencing {
			l.keys[2] = sideKey(key, "fence")
		}
		if o.minHoldSet || o.tokenSet {
			l.keys[3] = sideKey(key, "mins") // a minimum it takes, or its token may hold with
		}
	}
	chosen := ""
	if o.tokenSet {
		if err := checkToken(o.token); err != nil {
			return nil, o, err
		}
		chosen = o.token
		if l.x == nil {
			l.x = &lockExtra{}
		}
		l.x.chosen = true
	}
	if o.tokenPrefix != "" && l.x == nil {
		l.x = &lockExtra{} // a leadership's: its Proclaim's value (see Client.Local)
	}
	ttlArg := c.boxTTL(ttl)
	l.value = holdValue(o.tokenPrefix, chosen, ttlArg.span, o.metadata)
	if o.limitSet || o.shared {
		if err := c.newCounting(l, o); err != nil {
			return nil, o, err
		}
	}
	// The script arguments, boxed once for every call of this lock.
	l.args[0], l.args[1] = l.value, ttlArg.arg
	var key0 any = key
	tk := l.tryKeys()
	l.acqCmd = make([]any, 0, 3+len(tk)+3)
	l.acqCmd = append(l.acqCmd, "evalsha", acquireScript.digest(), numKeys[len(tk)], key0)
	for _, k := range tk[1:] {
		l.acqCmd = append(l.acqCmd, k)
	}
	l.acqCmd = append(l.acqCmd, l.args[0], l.args[1])
	if l.mins() != "" {
		l.acqCmd = append(l.acqCmd, o.minHold.Milliseconds()) // 0: none, but keep one the token holds with
	}
	return l, o, nil
}

// newToken returns a random UUIDv4 string: 122 random bits from
// crypto/rand.
func newToken() string {
	t := tokenText()
	return string(t[:])
}

// tokenText is a new random token (see newToken), as text.
func tokenText() [36]byte {
	var u uuid.UUID
	_, _ = rand.Read(u[:])  // never fails, and always fills u
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	var t [36]byte
	const hex = "0123456789abcdef"
	j := 0
	for i, b := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			t[j] = '-'
			j++
		}
		t[j], t[j+1] = hex[b>>4], hex[b&0x0f]
		j += 2
	}
	return t
}

// holdValue is a new lock's value (see parseValue), in one allocation: the
// chosen token, or prefix and a new random one; the span; and, if any, a
// space and the metadata.
func holdValue(prefix, chosen, span, metadata string) string {
	var b strings.Builder
	b.Grow(len(prefix) + 36 + len(chosen) + len(span) + 1 + len(metadata))
	if chosen != "" {
		b.WriteString(chosen)
	} else {
		t := tokenText()
		b.WriteString(prefix)
		b.Write(t[:])
	}
	b.WriteString(span)
	if metadata != "" {
		b.WriteByte(' ')
		b.WriteString(metadata)
	}
	return b.String()
}

// attempt runs the acquire script once for l. On success it records the
// fence and the send time in l and returns nil. When someone else holds the
// lock it returns ErrNotAcquired and the holder's remaining ttl (negative
// if unknown). Any other error is wrapped; if the script may have run, the
// lock is released again (see Lock.undo).
func (c *Client) attempt(ctx context.Context, l *Lock) (time.Duration, error) {
	if l.counted() != nil {
		return c.tryQueued(ctx, l)
	}
	if c.nodes != nil {
		return c.redlockAttempt(ctx, l)
	}
	var sent time.Time
	var n int64
	conn, err := l.onWriter(ctx, func(r doer) (err error) {
		sent = time.Now()
		n, err = l.acquireOn(ctx, r)
		return err
	})
	if conn != nil {
		defer conn.Close()
	}
	if err != nil {
		if mayHaveRun(err) {
			l.undo(ctx, err)
		}
		return 0, opError("acquire", l.key, err)
	}
	if n < 0 {
		return time.Duration(-2-n) * time.Millisecond, ErrNotAcquired
	}
	if conn != nil {
		if err := l.replicated(ctx, conn); err != nil {
			l.c.after(ctx, err, l.cleanup)
			return 0, err
		}
	}
	return 0, l.acquired(ctx, sent, n)
}

// minValidity is the share of its ttl that a lock must have left, by its
// local deadline, when the acquire's reply arrives; a lock that comes back
// with less (the round trip took most of the ttl) is released, not handed
// out.
const minValidity = 10 // percent

// acquired records a successful acquire sent at sent with fence fence. If
// the reply came so late that the lock's validity is (nearly) gone, it
// releases the lock and returns an error matching ErrNotAcquired.
func (l *Lock) acquired(ctx context.Context, sent time.Time, fence int64) error {
	l.mu.Lock()
	l.fence, l.sent = fence, sent
	l.took(sent, sent, l.minHold())
	left := time.Until(l.deadline())
	if left >= l.ttl/100*minValidity && l.c.nodes == nil {
		// Done with: let a long-held lock be smaller. (A waiter whose
		// lock came too late attempts again with it; a Redlock node that
		// has not answered yet may still be sending it.)
		l.acqCmd = nil
	}
	l.mu.Unlock()
	if left < l.ttl/100*minValidity {
		what := "left to its token" // see undo
		if l.undo(ctx, nil) {
			what = "released"
		}
		return fmt.Errorf("%w: %q: taken with only %v of its %v ttl left (the round trip took %v); %s",
			ErrNotAcquired, l.key, max(left, 0), l.ttl, time.Since(sent).Round(time.Millisecond), what)
	}
	return nil
}

// mayHaveRun reports whether a call that failed with err may still have
// run in Redis: not if Redis answered with an error (padlock's scripts and
// SET fail before their first write, if at all), nor if no connection could
// be made, nor if the caller's context ended before it was sent;
// otherwise (a timeout, a lost reply, a context that ended while it was in
// flight) it may.
func mayHaveRun(err error) bool {
	if isRedisError(err) || notSent(err) {
		return false
	}
	var nerr *net.OpError
	return !errors.As(err, &nerr) || nerr.Op != "dial"
}

// isRedisError reports whether err is an error reply from Redis.
func isRedisError(err error) bool {
	_, ok := driver.Error(err)
	return ok
}

// attemptWith runs one acquire attempt of l through run, a script that
// replies {1, fence} when l is acquired and {code, ms} when not
// (wait.lua), on l's writer. It returns like attempt: on success it
// records the acquire (waiting for replicas with WithReplicas); when not
// acquired, ErrNotAcquired and the script's ms. When the outcome is
// unknown (a lost reply) it releases what it may have taken.
func (l *Lock) attemptWith(ctx context.Context, run func(r doer) (any, error)) (time.Duration, error) {
	var sent time.Time
	var reply []any
	conn, err := l.onWriter(ctx, func(r doer) (err error) {
		sent = time.Now()
		reply, err = asSlice(run(r))
		return err
	})
	if conn != nil {
		defer conn.Close()
	}
	if err == nil && len(reply) < 2 {
		err = fmt.Errorf("unexpected reply %v", reply)
	}
	if err != nil {
		if mayHaveRun(err) {
			l.undo(ctx, err)
		}
		return 0, opError("acquire", l.key, err)
	}
	code, _ := reply[0].(int64)
	n, _ := reply[1].(int64)
	if code == 1 {
		if conn != nil {
			if err := l.replicated(ctx, conn); err != nil {
				l.c.after(ctx, err, l.cleanup)
				return 0, err
			}
		}
		return -1, l.acquired(ctx, sent, n)
	}
	return time.Duration(n) * time.Millisecond, ErrNotAcquired
}
