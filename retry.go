package padlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

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
			err = sleep(ctx, d)
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
