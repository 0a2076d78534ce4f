package padlock

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Counting semaphores (WithLimit) and shared holds of reader-writer locks
// (WithShared): keys with more than one holder at a time. Each holder is a
// member of a sorted set scored by its expiry on the server's clock (see
// lua/count.lua), so a holder that dies frees its place when its own ttl
// runs out, at the next call that looks.

// WithLimit makes the key a counting semaphore: up to n holders at once.
// TryAcquire, Acquire, TryDo and Do then take one of the n places; each
// holder gets a Lock of its own (its own token and ttl), and Release,
// Extend, TTL, KeepAlive, Deadline and Fence act on that holder's place as
// they do on a lock. A holder that dies frees its place when its ttl runs
// out. Waiting is fair across clients (first come, first served: a waiter
// is admitted only while fewer waiters are ahead of it than places are
// free, and TryAcquire only when more places are free than clients wait),
// and a release wakes the waiters. With WithFencing every holder gets a
// fence strictly greater than every earlier holder's of the key.
//
// Every call on one key should use the same n: each call admits a holder
// while fewer than its own n hold, so a call with a larger n can fill the
// places of a smaller one (and a smaller n is refused until enough
// holders leave); holders already in are never evicted.
//
// The key holds a sorted set of the holders' values (token, and metadata),
// scored by their expiry in ms; it cannot be used as a lock (WRONGTYPE).
// n under 1, WithShared with WithLimit, a multi-key acquire and a Redlock
// are ErrInvalid, as is a key with a brace but no hash tag (it can have no
// side keys for its waiters).
func WithLimit(n int) Option {
	return optionFunc(func(o *options) { o.limit, o.limitSet = n, true })
}

// WithShared takes a shared hold of the key, as a reader of a reader-writer
// lock: any number of shared holders at once, while the ordinary
// (exclusive) TryAcquire, Acquire and Do of the same key wait for (or are
// refused by) them all, and shared holds wait while an exclusive holder
// holds. Writers go first: once an exclusive Acquire waits for the key,
// new shared holds wait behind it, and the last shared holder out hands
// the lock to it. Each shared holder gets a Lock of its own, with its own
// token and lease, as with WithLimit.
//
// While shared holders hold, the key holds the value "padlock:shared"
// with the expiry of the last of them, and they are listed in a sorted set
// beside it (key:{key}:shared), so exclusive acquires, which never look
// beyond the key, cost nothing more. WithLimit with WithShared, a
// multi-key acquire and a Redlock are ErrInvalid.
func WithShared() Option {
	return optionFunc(func(o *options) { o.shared = true })
}

// sharedMarker is the value of a key while shared holders hold it.
const sharedMarker = "padlock:shared"

// countPoll bounds how long a waiting holder of a semaphore or shared hold
// sleeps between attempts, notifications or not: its attempts show Redis it
// is still there (see waiterStale).
const countPoll = time.Second

// waiterStale is how long a semaphore's waiter may go unseen before the
// others stop waiting for it.
const waiterStale = 5 * time.Second

var (
	waiterStaleArg any = waiterStale.Milliseconds()
	queueTTLArg    any = queueTTL.Milliseconds()
)

// counting is what a semaphore's or shared hold's Lock carries.
type counting struct {
	shared bool      // a shared hold (WithShared), not a semaphore
	limit  any       // the limit as a script argument; 0 for a shared hold
	keys   [6]string // see lua/count.lua; keys[5] is "" unless fenced
}

// scriptKeys are the keys count.lua takes: the fencing counter only when
// fenced.
func (k *counting) scriptKeys() []string {
	if k.keys[5] == "" {
		return k.keys[:5]
	}
	return k.keys[:]
}

// newCounting checks the options of a semaphore or shared hold of l and
// sets l up for it. It makes no round trip.
func (c *Client) newCounting(l *Lock, o options) error {
	switch {
	case o.limitSet && o.shared:
		return fmt.Errorf("%w: WithLimit and WithShared together", ErrInvalid)
	case o.limitSet && o.limit < 1:
		return fmt.Errorf("%w: WithLimit(%d): the limit must be at least 1", ErrInvalid, o.limit)
	case c.nodes != nil:
		return fmt.Errorf("%w: WithLimit and WithShared on a Redlock are not supported", ErrInvalid)
	case !queueable(l.key):
		return fmt.Errorf("%w: WithLimit and WithShared need a key with a hash tag or without braces, got %q", ErrInvalid, l.key)
	}
	k := &counting{limit: 0}
	k.keys[0] = l.key
	k.keys[1] = l.key
	if o.shared {
		k.shared = true
		k.keys[1] = sideKey(l.key, "shared")
	} else {
		k.limit = o.limit
	}
	k.keys[2] = sideKey(l.key, "queue")
	k.keys[3] = sideKey(l.key, "seen")
	k.keys[4] = sideKey(l.key, "fences")
	if o.fencing {
		k.keys[5] = sideKey(l.key, "fence")
	}
	if l.x == nil {
		l.x = &lockExtra{}
	}
	l.x.count = k
	return nil
}

// counted returns l's semaphore or shared-hold settings, or nil for a lock.
func (l *Lock) counted() *counting {
	if l.x == nil {
		return nil
	}
	return l.x.count
}

// countAttempt is one attempt to take a place (see lua/count.lua); queued
// says whether the caller waits in the queue. It returns like attempt.
func (c *Client) countAttempt(ctx context.Context, l *Lock, queued bool) (time.Duration, error) {
	k := l.counted()
	q := ""
	if queued {
		q = "1"
	}
	return l.attemptWith(ctx, func(r doer) *redis.Cmd {
		return countScript.Run(ctx, r, k.scriptKeys(), l.args[0], l.args[1], k.limit, l.tok(), q, waiterStaleArg, queueTTLArg)
	})
}

// countWaiting is Acquire for a semaphore or a shared hold: it queues in
// Redis, and attempts again when a release is announced, when the first
// holder's ttl runs out, or after its backoff (at most countPoll).
func (c *Client) countWaiting(ctx context.Context, l *Lock, o options) (_ *Lock, err error) {
	k := l.counted()
	var w *waiter
	if o.notify {
		if w, err = c.enqueueFree(l.key, l.tok(), k.shared); err != nil {
			return nil, opError("acquire", l.key, err)
		}
		defer c.dequeue(w, err == nil)
	}
	held := false // whether an attempt found no place: only then is a timeout contention
	defer func() {
		if err != nil && held {
			l.leaveCount(ctx)
		}
	}()
	waiting := false
	if obs := l.observer(); obs != nil {
		defer func() {
			if waiting && obs.WaitDone != nil {
				obs.WaitDone(ctx, l.key)
			}
		}()
	}
	subscribed := false
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			if held {
				return nil, notAcquired(ctx, l.key)
			}
			return nil, opError("acquire", l.key, err)
		}
		pttl, err := c.countAttempt(ctx, l, true)
		switch {
		case err == nil:
			return l, nil
		case held && ctx.Err() != nil:
			return nil, notAcquired(ctx, l.key)
		case err != ErrNotAcquired:
			return nil, err
		}
		held = true
		if !waiting {
			waiting = true
			if obs := l.observer(); obs != nil && obs.WaitStart != nil {
				obs.WaitStart(ctx, l.key)
			}
		}
		if w != nil && !subscribed {
			subscribed = true
			if c.subscribe(ctx, l.key) {
				continue // a release before the subscription would go unheard
			}
		}
		// Subscribed, a release wakes it: sleep until the first holder's
		// ttl runs out, or countPoll. Otherwise back off as Acquire does.
		d := min(waitTime(o.backoff, attempt, pttl), countPoll)
		if subscribed {
			d = countPoll
			if pttl >= 0 {
				d = min(pttl+time.Millisecond, countPoll)
			}
		}
		var werr error
		if w == nil {
			werr = c.wait(ctx, l.key, d)
		} else {
			t := time.NewTimer(d)
			select {
			case <-w.wake:
			case <-t.C:
			case <-ctx.Done():
				werr = ctx.Err()
			}
			t.Stop()
		}
		if werr != nil {
			return nil, notAcquired(ctx, l.key)
		}
		if w != nil && c.notify.isClosed() {
			return nil, fmt.Errorf("padlock: acquire %q: %w", l.key, ErrClosed)
		}
	}
}

// leaveCount takes a waiter that gives up out of the queue, best effort.
func (l *Lock) leaveCount(ctx context.Context) {
	k := l.counted()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lateCleanupTimeout)
	defer cancel()
	_, _ = l.c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRem(ctx, k.keys[2], l.tok())
		p.ZRem(ctx, k.keys[3], l.tok())
		return nil
	})
}

// HolderInfo describes one holder of a semaphore or of a shared hold, as
// Client.Inspect reads it.
type HolderInfo struct {
	Token    string
	Metadata string
	TTL      time.Duration // time left
	Fence    int64         // its fence, if it was taken WithFencing
}

// parseHolders reads the holders from inspect.lua's reply: value, expiry
// (ms), fence, for each, and the server's time now (ms).
func parseHolders(flat []any, now int64) []HolderInfo {
	var hs []HolderInfo
	for i := 0; i+2 < len(flat); i += 3 {
		v, _ := flat[i].(string)
		exp, _ := strconv.ParseInt(fmt.Sprint(flat[i+1]), 10, 64)
		h := HolderInfo{TTL: time.Duration(exp-now) * time.Millisecond}
		h.Token, h.Metadata = splitValue(v)
		if s, ok := flat[i+2].(string); ok {
			h.Fence, _ = strconv.ParseInt(s, 10, 64)
		}
		hs = append(hs, h)
	}
	return hs
}
