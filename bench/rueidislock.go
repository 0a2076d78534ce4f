package main

import (
	"context"
	"errors"
	"log"
	"sync"
	"time"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

// rueidislock (github.com/redis/rueidis/rueidislock), "rueidislock", with
// its defaults: a lock is a majority of 3 keys (KeyMajority 2), taken one
// after another, and client tracking without NOLOOP, so a client is sent
// the invalidations of its own writes too. "rueidislock-km1" is configured
// as rueidislock's own README and benchmark have it for one Redis: one key
// (KeyMajority 1) and NoLoopTracking (Redis 7.0.5 and later). Either way
// waiters are woken by client-side caching's invalidations, not by
// polling, and every lock is kept alive (extended every KeyValidity/2)
// until it is released, so the ttl of try and lock is KeyValidity,
// lockTTL, for every lock. It has no fencing, semaphores, shared holds or
// queue.
type rueidislockLocker struct {
	name string
	l    rueidislock.Locker
}

// newRueidislock returns the new of an impl named name: rueidislock with
// keyMajority (0: its default, 2) and noLoop as NoLoopTracking.
func newRueidislock(name string, keyMajority int32, noLoop bool) func(addr string) (locker, *counter) {
	return func(addr string) (locker, *counter) {
		cnt := &counter{}
		l, err := rueidislock.NewLocker(rueidislock.LockerOption{
			ClientOption: rueidis.ClientOption{InitAddress: []string{addr}, DialCtxFn: cnt.rueidisDialer},
			ClientBuilder: func(opt rueidis.ClientOption) (rueidis.Client, error) {
				c, err := rueidis.NewClient(opt)
				if err != nil {
					return nil, err
				}
				return &countedRueidis{c, cnt}, nil
			},
			KeyValidity:    lockTTL,
			KeyMajority:    keyMajority,
			NoLoopTracking: noLoop,
		})
		if err != nil {
			log.Fatalf("%s: %v", name, err)
		}
		return rueidislockLocker{name, l}, cnt
	}
}

func (r rueidislockLocker) String() string { return r.name }
func (r rueidislockLocker) close()         { r.l.Close() }

func (r rueidislockLocker) try(ctx context.Context, key string, _ time.Duration) (func(context.Context) error, error) {
	held, release, err := r.l.TryWithContext(context.WithoutCancel(ctx), key)
	if err != nil {
		return nil, err
	}
	return unlocker(held, release), nil
}

// lock waits for key until ctx ends. The lock rueidislock returns lasts
// as long as the context it was taken with: it is taken with one that
// only ends, while waiting, when ctx does.
func (r rueidislockLocker) lock(ctx context.Context, key string, _ time.Duration) (func(context.Context) error, error) {
	hold, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var (
		mu   sync.Mutex
		done bool // WithContext has returned: ctx's end no longer cancels hold
	)
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			cancel()
		}
	})
	held, release, err := r.l.WithContext(hold, key)
	mu.Lock()
	done = true
	mu.Unlock()
	stop()
	if err != nil {
		cancel()
		return nil, err
	}
	if held.Err() != nil { // ctx ended as the lock came
		release()
		cancel()
		return nil, errors.Join(errBusy, ctx.Err())
	}
	return unlocker(held, func() { release(); cancel() }), nil
}

// unlocker releases a rueidislock lock: release deletes its keys and
// returns when they are; a lock already lost is an error.
func unlocker(held context.Context, release func()) func(context.Context) error {
	return func(context.Context) error {
		lost := held.Err()
		release()
		if lost != nil {
			return errors.New("rueidislock: lock lost before its release")
		}
		return nil
	}
}
