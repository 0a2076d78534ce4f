package padlock

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/padlock-go/padlock/driver"
)

// TryAcquireMany makes one attempt to take every key of keys for ttl,
// atomically, in one round trip: all of them or none. It does not wait.
//
// The Lock it returns holds all the keys under one token: Release, Extend,
// TTL and KeepAlive act on all of them, and Keys lists them. If another
// holder has any of the keys, it returns an error matching ErrNotAcquired
// and takes none. Empty or repeated keys, WithFencing (a fence is per key;
// fence the keys one by one), and, on a Redis Cluster, keys in different
// slots (give them a common hash tag, like "{order:42}:items" and
// "{order:42}:payment") return ErrInvalid before any round trip. Otherwise
// it fails like TryAcquire.
func (c *Client) TryAcquireMany(ctx context.Context, keys []string, ttl time.Duration, opts ...Option) (*Lock, error) {
	l, _, err := c.newManyLock(ctx, keys, ttl, opts)
	if err != nil {
		return nil, err
	}
	if l.observer() != nil {
		return c.holding(observeAcquire(ctx, l, false, c.tryAcquire))
	}
	return c.holding(c.tryAcquire(ctx, l))
}

// AcquireMany takes every key of keys for ttl, atomically, waiting while
// any of them is held elsewhere, until it succeeds or ctx is done. It
// blocks. It waits in the queue of every key, first come, first served
// with the locks of each (see Acquire): when it is first in all of them
// and they are free, it gets them all at once. It fails like
// TryAcquireMany and Acquire.
func (c *Client) AcquireMany(ctx context.Context, keys []string, ttl time.Duration, opts ...Option) (*Lock, error) {
	l, o, err := c.newManyLock(ctx, keys, ttl, opts)
	if err != nil {
		return nil, err
	}
	return c.holding(c.acquireObserved(ctx, l, o))
}

// Keys returns the keys the lock holds: the one key of TryAcquire and
// Acquire, or the keys of TryAcquireMany and AcquireMany.
func (l *Lock) Keys() []string {
	if l == nil {
		return nil
	}
	if l.multi() != nil {
		return append([]string(nil), l.multi()...)
	}
	return []string{l.key}
}

// newManyLock checks the arguments of a multi-key acquire and builds its
// Lock.
func (c *Client) newManyLock(ctx context.Context, keys []string, ttl time.Duration, opts []Option) (*Lock, options, error) {
	if len(keys) == 0 {
		return nil, options{}, fmt.Errorf("%w: no keys", ErrInvalid)
	}
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if seen[k] {
			return nil, options{}, fmt.Errorf("%w: key %q given twice", ErrInvalid, k)
		}
		seen[k] = true
	}
	o := c.defaults().with(opts)
	if o.fencing {
		return nil, o, fmt.Errorf("%w: fencing a multi-key lock is not supported: a fence counts per key, so fence the keys one by one", ErrInvalid)
	}
	if o.minHoldSet {
		return nil, o, fmt.Errorf("%w: WithMinHold on a multi-key lock is not supported", ErrInvalid)
	}
	l, o, err := c.newLock(ctx, keys[0], ttl, append(opts[:len(opts):len(opts)], WithoutFencing()))
	if err != nil {
		return nil, o, err
	}
	for _, k := range keys[1:] {
		if k == "" {
			return nil, o, fmt.Errorf("%w: empty key", ErrInvalid)
		}
	}
	if c.kind == driver.Cluster {
		for _, k := range keys[1:] {
			if slot(k) != slot(keys[0]) {
				return nil, o, fmt.Errorf("%w: %q and %q are in different cluster slots; give the keys a common hash tag, like {%s}:a and {%s}:b",
					ErrInvalid, keys[0], k, keys[0], keys[0])
			}
		}
	}
	if l.counted() != nil {
		return nil, o, fmt.Errorf("%w: WithLimit and WithShared on a multi-key acquire are not supported", ErrInvalid)
	}
	if l.x == nil {
		l.x = &lockExtra{}
	}
	l.x.many = append([]string(nil), keys...)
	for _, k := range keys {
		if !queueable(k) {
			l.keys[1] = "" // no queue in Redis for this one: wait on the attempt path
		}
	}
	return l, o, nil
}

// slot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its hash
// tag, or of the whole key, modulo 16384.
func slot(key string) uint16 {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			key = key[open+1 : open+1+end]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
