package padlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/padlock-go/padlock/driver"
)

// Resume returns the Lock that token holds on key now, read from Redis in
// one round trip: a lock, a place of a semaphore (WithLimit) or a shared
// hold (WithShared), whichever token holds; Redis says which. It is for a
// process other than the one that took the lock (a worker that releases
// what an API call took, the last job of a pipeline, a process that
// restarted), and blocks until Redis answers.
//
// Release, Extend, TTL, KeepAlive, Deadline, Fence and Metadata work on the
// returned Lock as on the original. Its ttl is what Redis says is left of
// the lock, and its Deadline counts that from when Resume's round trip was
// sent; KeepAlive renews it for that ttl, and for the ttl of the last
// Extend after one. A minimum the hold is kept for (WithMinHold) is
// Redis's: Resume reads what is left of it, and the Lock's Deadline,
// Release and KeepAlive count it as the original's do, after an Extend
// too; WithMinHold in opts changes nothing. Whatever kind it is, a holder
// that took a fence (WithFencing) resumes with that fence, which Redis
// records beside it, and one that took none with Fence 0; WithFencing in
// opts is accepted and changes nothing. The other options that apply are
// WithReplicas, WithObserver (its acquire callbacks are not called) and
// WithMaxHold: Redis does not keep the original's cap, so the returned
// Lock has none unless opts give one, which counts from Resume's round
// trip (see WithMaxHold). Each key of a lock taken with TryAcquireMany
// resumes as a lock of that key alone.
//
// It returns an error matching ErrNotHeld if token does not hold key (it
// expired, was released, or another token holds it), ErrInvalid for an
// empty key or token (or one WithToken would refuse), ErrClosed with no
// round trip on a closed Client, and a wrapped Redis error if Redis
// cannot answer. It changes nothing in Redis. On a Redlock
// Client the token must hold the lock on a quorum of the nodes, and the
// ttl is what the quorum still guarantees.
func (c *Client) Resume(ctx context.Context, key, token string, opts ...Option) (*Lock, error) {
	if _, err := c.check(ctx, key, time.Millisecond); err != nil {
		return nil, err
	}
	if err := c.open("resume", key); err != nil {
		return nil, err
	}
	if err := checkToken(token); err != nil {
		return nil, err
	}
	if c.nodes != nil {
		return c.redlockResume(ctx, key, token, opts)
	}
	keys := []string{key}
	if queueable(key) {
		keys = append(keys, sideKey(key, "queue"))
	}
	sent := time.Now()
	reply, err := asSlice(resumeScript.Run(ctx, c.d, keys, token))
	if err != nil {
		return nil, opError("resume", key, err)
	}
	if len(reply) != 6 {
		return nil, fmt.Errorf("%w: %q is not held by token %q", ErrNotHeld, key, token)
	}
	kind, _ := reply[0].(string)
	value, _ := reply[1].(string)
	ms, _ := reply[2].(int64)
	fence, fenced := int64(0), false
	if s, ok := reply[3].(string); ok {
		fence, _ = strconv.ParseInt(s, 10, 64)
		fenced = true
	}
	limit, _ := reply[4].(int64)
	minLeft, _ := reply[5].(int64)
	if ms < 1 {
		return nil, fmt.Errorf("%w: %q: token %q holds it with no time left", ErrNotHeld, key, token)
	}
	_, meta := splitValue(value)
	opts = append(opts[:len(opts):len(opts)], WithToken(token), WithMetadata(meta))
	opts = append(opts, resumedAs(kind, int(limit), fenced))
	l, _, err := c.newLock(ctx, key, time.Duration(ms)*time.Millisecond, opts)
	if err != nil {
		return nil, err
	}
	// Redis's value, as it is: a semaphore's or shared hold's holder is
	// found by it, span and all (see parseValue).
	l.value, l.args[0], l.acqCmd = value, value, nil
	l.sent = sent
	l.took(sent, sent, time.Duration(minLeft)*time.Millisecond)
	if l.fenced() {
		l.fence = fence
	}
	return c.holding(l, nil)
}

// resumedAs sets the kind of a resumed Lock to what Redis holds: kind 's'
// a shared hold, 'n' a place of a semaphore of limit places, else a lock;
// it is fenced if Redis recorded the holder's fence (whatever WithFencing
// said).
func resumedAs(kind string, limit int, fenced bool) Option {
	return optionFunc(func(o *options) {
		o.shared, o.limitSet, o.limit = kind == kindShared, kind == kindPlace, limit
		o.fencing = fenced
		o.minHold, o.minHoldSet = 0, false // a minimum it holds with is Redis's: Resume reads what is left
	})
}

// Break ends whatever holds key now, for an operator: the lock, or every
// holder of a semaphore or shared hold. In the same round trip it
// advances the key's fencing counter, if the key has one, so that storage
// that checks fences rejects the writes of a broken holder once it has
// seen a fence of a later one, and it serves the key's waiters (the first
// gets the lock at once). It blocks until Redis answers.
//
// It returns what it broke, as Inspect would have shown it just before. A
// key that nobody holds is not an error: nothing changes, and Held is
// false. The broken holders find out at their next renewal (KeepAlive's
// context ends with ErrLost), Extend or Release (ErrNotHeld). It returns
// ErrInvalid for an empty key, and a wrapped Redis error if Redis cannot
// answer; a key of another type (a hash, say) is reported and left alone. On a Redlock Client it breaks
// the lock on every node that answers, and returns what the first node
// that held it showed.
func (c *Client) Break(ctx context.Context, key string) (LockInfo, error) {
	if _, err := c.check(ctx, key, time.Millisecond); err != nil {
		return LockInfo{Key: key}, err
	}
	if c.nodes != nil {
		return c.redlockBreak(ctx, key)
	}
	sent := time.Now()
	reply, err := asSlice(breakScript.Run(ctx, c.d, inspectKeys(key), c.notify.id))
	if err != nil {
		return LockInfo{Key: key}, opError("break", key, err)
	}
	before, _ := reply[0].([]any)
	info, err := readInspect(key, before)
	if err != nil {
		return info, err
	}
	c.deliver(readNews(reply, 1), sent, false)
	return info, nil
}

// redlockResume is Resume on a Redlock Client: the lock, if token holds
// it on a quorum of the nodes, with the ttl the quorum still guarantees
// (see quorumPTTL), and the minimum.
func (c *Client) redlockResume(ctx context.Context, key, token string, opts []Option) (*Lock, error) {
	keys := []string{key}
	if queueable(key) {
		keys = append(keys, sideKey(key, "queue")) // for its minimum's side key
	}
	sent := time.Now()
	var mu sync.Mutex
	value := ""      // what a node that holds it holds
	var mins []int64 // what is left of its minimum on each node that holds it
	ms, err := c.quorumPTTL(ctx, resumeNodeTTL, func(ctx context.Context, _ int, r driver.Driver) (int64, error) {
		reply, err := asSlice(resumeScript.Run(ctx, r, keys, token))
		if err != nil || len(reply) != 6 {
			return -3, err
		}
		mu.Lock()
		value, _ = reply[1].(string)
		m, _ := reply[5].(int64)
		mins = append(mins, m)
		mu.Unlock()
		ms, _ := reply[2].(int64)
		return ms, nil
	})
	switch {
	case err != nil:
		return nil, opError("resume", key, err)
	case ms < 1:
		return nil, fmt.Errorf("%w: %q is not held by token %q on a quorum of the nodes", ErrNotHeld, key, token)
	}
	mu.Lock()
	_, meta := splitValue(value)
	minLeft := int64(0) // what a quorum keeps
	if len(mins) >= c.quorum() {
		slices.Sort(mins)
		minLeft = mins[len(mins)-c.quorum()]
	}
	mu.Unlock()
	opts = append(opts[:len(opts):len(opts)], WithToken(token), WithMetadata(meta), resumedAs(kindLock, 0, false))
	l, _, err := c.newLock(ctx, key, time.Duration(ms)*time.Millisecond, opts)
	if err != nil {
		return nil, err
	}
	l.sent = sent
	l.took(sent, sent, time.Duration(minLeft)*time.Millisecond)
	return c.holding(l, nil)
}

// resumeNodeTTL makes onNodes give each node of a Redlock Resume or Break
// half a second.
const resumeNodeTTL = 5 * time.Second

// redlockBreak is Break on a Redlock Client: on every node at once; it
// returns what the first node that held the key showed, and an error only
// if no node answered.
func (c *Client) redlockBreak(ctx context.Context, key string) (LockInfo, error) {
	var mu sync.Mutex
	infos := make([]LockInfo, len(c.nodes))
	res := c.onNodes(ctx, resumeNodeTTL, nodeTurns{}, func(ctx context.Context, i int, r driver.Driver) (int64, error) {
		reply, err := asSlice(breakScript.Run(ctx, r, inspectKeys(key), c.notify.id))
		if err != nil {
			return 0, err
		}
		before, _ := reply[0].([]any)
		info, err := readInspect(key, before)
		mu.Lock()
		infos[i] = info
		mu.Unlock()
		return 1, err
	}, nil)
	mu.Lock()
	defer mu.Unlock()
	var errs []error
	for i, r := range res {
		if r.err != nil {
			errs = append(errs, r.err)
		} else if infos[i].Held {
			return infos[i], nil
		}
	}
	if len(errs) == len(c.nodes) {
		return LockInfo{Key: key}, opError("break", key, errors.Join(errs...))
	}
	return LockInfo{Key: key}, nil
}
