package padlock

import (
	"fmt"
	"strconv"
	"time"
)

// Counting semaphores (WithLimit) and shared holds of reader-writer locks
// (WithShared): keys with more than one holder at a time. Each holder is a
// member of a sorted set scored by its expiry on the server's clock, so a
// holder that dies frees its place when its own ttl runs out, at the next
// call that looks. They wait as every lock does (see wait.go).

// WithLimit makes the key a counting semaphore: up to n holders at once.
// TryAcquire, Acquire, TryDo and Do then take one of the n places; each
// holder gets a Lock of its own (its own token and ttl), and Release,
// Extend, TTL, KeepAlive, Deadline and Fence act on that holder's place as
// they do on a lock. A holder that dies frees its place when its ttl runs
// out. Waiting is first come, first served across clients: a release hands
// its place to the first waiter, and TryAcquire takes a place only when
// one is free and nobody waits. With WithFencing every holder gets a fence
// strictly greater than every earlier holder's of the key.
//
// The key's n is stored beside it while anyone holds or waits: a call with
// another n fails with ErrInvalid, naming the stored n, and changes
// nothing.
//
// The key holds a sorted set of the holders' values (token, and metadata),
// scored by their expiry in ms. Do not use a semaphore's key as a lock
// (exclusive or WithShared), or a lock's as a semaphore: the two keep the
// key as different types, so such a call that finds the other holding it
// fails with a WRONGTYPE error; one that comes to wait in the queue waits
// until the other kind's holders are gone, and keeps the key's later
// waiters behind it.
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
// holds. Waiting is first come, first served, as sync.RWMutex is: an
// exclusive Acquire that waits keeps out the shared holds that come after
// it, and the shared holds that were waiting before it go first. Each
// shared holder gets a Lock of its own, with its own token and lease, as
// with WithLimit.
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

// counting is what a semaphore's or shared hold's Lock carries.
type counting struct {
	shared bool // a shared hold (WithShared), not a semaphore
	limit  int  // the semaphore's places; 0 for a shared hold
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
	k := &counting{shared: o.shared}
	if !o.shared {
		k.limit = o.limit
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

// HolderInfo describes one holder of a semaphore or of a shared hold, as
// Client.Inspect reads it.
type HolderInfo struct {
	Token    string
	Metadata string
	TTL      time.Duration // time left
	Fence    int64         // its fence, if it was taken WithFencing
	MinHold  time.Duration // how long its WithMinHold still keeps it held, 0 if not
	HeldFor  time.Duration // how long it has held (since its acquire, by the server's clock), 0 if not known
}

// parseHolders reads the holders from inspect.lua's reply: value, expiry
// (ms), fence, the end of its minimum (ms) and when it came in (ms), for
// each, and the server's time now (ms).
func parseHolders(flat []any, now int64) []HolderInfo {
	var hs []HolderInfo
	for i := 0; i+4 < len(flat); i += 5 {
		v, _ := flat[i].(string)
		exp, _ := strconv.ParseInt(fmt.Sprint(flat[i+1]), 10, 64)
		h := HolderInfo{TTL: time.Duration(exp-now) * time.Millisecond}
		h.Token, h.Metadata = splitValue(v)
		if s, ok := flat[i+2].(string); ok {
			h.Fence, _ = strconv.ParseInt(s, 10, 64)
		}
		h.MinHold = max(msUntil(flat[i+3], now), 0)
		h.HeldFor = max(-msUntil(flat[i+4], now), 0)
		hs = append(hs, h)
	}
	return hs
}
