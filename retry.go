package padlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Backoff says how long to wait before the next attempt, given how many
// attempts have failed before it (0 for the first wait). It must be safe
// for concurrent use; a function of attempt alone, like the ones
// ExponentialBackoff returns, can be shared by every goroutine.
type Backoff func(attempt int) time.Duration

// defaultBackoff is the Backoff used when none is given.
var defaultBackoff = ExponentialBackoff(8*time.Millisecond, 512*time.Millisecond)

// ExponentialBackoff returns a stateless, jittered Backoff: the wait before
// retry n is drawn uniformly from [d/2, d], where d is lo doubled n times
// and capped at hi. A lo under 1ms is taken as 1ms, a hi under lo as lo.
func ExponentialBackoff(lo, hi time.Duration) Backoff {
	lo = max(lo, time.Millisecond)
	hi = max(hi, lo)
	return func(attempt int) time.Duration {
		d := hi
		if attempt >= 0 && attempt < 62 && lo<<attempt > 0 && lo<<attempt < hi {
			d = lo << attempt
		}
		return d/2 + rand.N(d-d/2+1)
	}
}

// waitTime is how long Acquire sleeps after failed attempt number attempt,
// when the holder's lock has pttl left (negative if unknown): the backoff,
// but no longer than it takes the lock to expire, plus up to 2ms of jitter
// so that waiters woken by the same expiry do not all retry at once.
func waitTime(b Backoff, attempt int, pttl time.Duration) time.Duration {
	d := b(attempt)
	if pttl >= 0 {
		if e := pttl + rand.N(2*time.Millisecond); e < d {
			d = e
		}
	}
	return d
}

// sleep waits for d, or until ctx ends, and then returns ctx's error.
func sleep(ctx context.Context, _ string, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// acquireWaiting is Acquire once its arguments are checked: attempts, and
// waits between them, until l is acquired or ctx ends. Locks whose waiters
// queue in Redis wait in queueWaiting (see wait.go); what is left here, the
// attempt path, is Redlock and keys with a brace but no hash tag.
//
// With notifications on, the call queues behind this Client's earlier
// waiters for the key and does not attempt before its turn: a release wakes
// only the head of the queue. The head also sleeps no longer than the
// holder's remaining ttl or its backoff, in case a notification is lost.
func (c *Client) acquireWaiting(ctx context.Context, l *Lock, o options) (_ *Lock, err error) {
	if l.queued() {
		return c.queueWaiting(ctx, l, o)
	}
	var w *waiter
	var held bool
	head := true
	if o.notify {
		if w, head, err = c.enqueue(l.key, l.tok(), l.observer()); err != nil {
			return nil, opError("acquire", l.key, err)
		}
		defer func() { c.dequeue(w, err == nil) }()
	}
	waiting := false // whether the observer was told this call waits
	if obs := l.observer(); obs != nil {
		defer func() {
			if waiting && obs.WaitDone != nil {
				obs.WaitDone(ctx, l.key)
			}
		}()
	}
	held = !head        // whether the lock was found held: only then is a timeout contention
	subscribed := false // whether this call has subscribed the key's channel
	mustAttempt := head // whether the next step is an attempt (else: a wait)
	for attempt := 0; ; attempt++ {
		d := o.backoff(attempt)
		if mustAttempt {
			if err := ctx.Err(); err != nil {
				if held {
					return nil, notAcquired(ctx, l.key)
				}
				return nil, opError("acquire", l.key, err)
			}
			pttl, err := c.attempt(ctx, l)
			switch {
			case err == nil:
				return l, nil
			case held && ctx.Err() != nil:
				return nil, notAcquired(ctx, l.key)
			case !errors.Is(err, ErrNotAcquired):
				return nil, err
			}
			held = true
			d = waitTime(o.backoff, attempt, pttl)
		}
		if w != nil && !subscribed {
			subscribed = true
			if c.subscribe(ctx, l.key) && head && mustAttempt {
				// A release between our attempt and the subscription
				// would go unheard: look once more.
				attempt--
				continue
			}
		}
		mustAttempt = true
		if !waiting {
			waiting = true
			if obs := l.observer(); obs != nil && obs.WaitStart != nil {
				obs.WaitStart(ctx, l.key)
			}
		}

		var err error
		switch {
		case w == nil:
			err = c.wait(ctx, l.key, d)
		case !head:
			// Not our turn: wait for the waiters ahead to go.
			select {
			case <-w.turn:
				head = true
				select {
				case <-w.wake:
				default:
					mustAttempt = false // the one ahead took the lock: wait for its release
				}
			case <-ctx.Done():
				err = ctx.Err()
			}
		default:
			t := time.NewTimer(d)
			select {
			case <-w.wake:
			case <-t.C:
			case <-ctx.Done():
				err = ctx.Err()
			}
			t.Stop()
		}
		if err != nil {
			return nil, notAcquired(ctx, l.key)
		}
		if w != nil && c.notify.isClosed() {
			return nil, fmt.Errorf("padlock: acquire %q: %w", l.key, ErrClosed)
		}
	}
}

// attemptWith runs one acquire attempt of l through run, a script that
// replies {1, fence} when l is acquired and {0, ms} when not (wait.lua,
// count.lua), on l's writer. It returns like attempt: on success it
// records the acquire (waiting for replicas with WithReplicas); when not
// acquired, ErrNotAcquired and the script's ms. When the outcome is
// unknown (a lost reply) it releases what it may have taken.
func (l *Lock) attemptWith(ctx context.Context, run func(r doer) *redis.Cmd) (time.Duration, error) {
	var sent time.Time
	var reply []any
	conn, err := l.onWriter(ctx, func(r doer) (err error) {
		sent = time.Now()
		reply, err = run(r).Slice()
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
			l.undo(ctx)
		}
		return 0, opError("acquire", l.key, err)
	}
	code, _ := reply[0].(int64)
	n, _ := reply[1].(int64)
	if code == 1 {
		if conn != nil {
			if err := l.replicated(ctx, conn); err != nil {
				l.cleanup(ctx)
				return 0, err
			}
		}
		return -1, l.acquired(ctx, sent, n)
	}
	return time.Duration(n) * time.Millisecond, ErrNotAcquired
}
