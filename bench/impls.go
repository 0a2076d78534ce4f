package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock"
)

// A locker is one implementation under test.
type locker interface {
	// try makes one attempt at key.
	try(ctx context.Context, key string, ttl time.Duration) (unlock func(context.Context) error, err error)
	// lock waits for key until ctx ends.
	lock(ctx context.Context, key string, ttl time.Duration) (unlock func(context.Context) error, err error)
	close()
	String() string
}

// An impl is one implementation: new makes a locker on a new client of
// addr, which the locker's close closes, and returns the client's counter.
type impl struct {
	name string
	new  func(addr string) (locker, *counter)
}

func impls() []impl {
	var all []impl
	for _, d := range allPadlockDrivers() {
		all = append(all, impl{d.name, func(addr string) (locker, *counter) {
			c, cnt, closeAll := d.open(addr)
			return padlockLocker{d.name, c, closeAll}, cnt
		}})
	}
	all = append(all,
		impl{"rueidislock", newRueidislock("rueidislock", 0, false)},
		impl{"rueidislock-km1", newRueidislock("rueidislock-km1", 1, true)},
		impl{"redislock", onGoRedis(func(rdb *redis.Client) locker { return redislockLocker{redislock.New(rdb)} })},
		impl{"redsync", onGoRedis(func(rdb *redis.Client) locker { return redsyncLocker{redsync.New(goredis.NewPool(rdb))} })},
		impl{"go-redis-floor", onGoRedis(func(rdb *redis.Client) locker { return floorLocker{rdb} })},
	)
	if *only == "" || *child {
		return all
	}
	var some []impl
	for _, im := range all {
		if slices.Contains(strings.Split(*only, ","), im.name) {
			some = append(some, im)
		}
	}
	return some
}

// onGoRedis is the new of an impl on a go-redis client, which the locker's
// close then closes.
func onGoRedis(f func(rdb *redis.Client) locker) func(addr string) (locker, *counter) {
	return func(addr string) (locker, *counter) {
		rdb, cnt := countedClient(addr)
		return closing{f(rdb), func() { _ = rdb.Close() }}, cnt
	}
}

// closing is a locker whose close also runs after.
type closing struct {
	locker
	after func()
}

func (c closing) close() {
	c.locker.close()
	c.after()
}

var errBusy = errors.New("bench: lock busy")

// padlock, on go-redis, rueidis or valkey-go: Acquire waits with release
// notifications.
type padlockLocker struct {
	name     string
	c        *padlock.Client
	closeAll func() // closes c and its Redis client
}

func (p padlockLocker) String() string { return p.name }
func (p padlockLocker) close()         { p.closeAll() }
func (p padlockLocker) try(ctx context.Context, key string, ttl time.Duration) (func(context.Context) error, error) {
	l, err := p.c.TryAcquire(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}
func (p padlockLocker) lock(ctx context.Context, key string, ttl time.Duration) (func(context.Context) error, error) {
	l, err := p.c.Acquire(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

// padlockSemaphore: one of limit places of a padlock semaphore
// (WithLimit); only padlock has them.
type padlockSemaphore struct {
	c     *padlock.Client
	limit int
}

func (p padlockSemaphore) String() string { return fmt.Sprintf("padlock WithLimit(%d)", p.limit) }
func (p padlockSemaphore) close()         { _ = p.c.Close() }
func (p padlockSemaphore) try(ctx context.Context, key string, ttl time.Duration) (func(context.Context) error, error) {
	l, err := p.c.TryAcquire(ctx, key, ttl, padlock.WithLimit(p.limit))
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}
func (p padlockSemaphore) lock(ctx context.Context, key string, ttl time.Duration) (func(context.Context) error, error) {
	l, err := p.c.Acquire(ctx, key, ttl, padlock.WithLimit(p.limit))
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

// bsm/redislock: polls every pollEvery while it waits.
type redislockLocker struct{ c *redislock.Client }

func (r redislockLocker) String() string { return "redislock" }
func (r redislockLocker) close()         {}
func (r redislockLocker) try(ctx context.Context, key string, ttl time.Duration) (func(context.Context) error, error) {
	l, err := r.c.Obtain(ctx, key, ttl, nil)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}
func (r redislockLocker) lock(ctx context.Context, key string, ttl time.Duration) (func(context.Context) error, error) {
	l, err := r.c.Obtain(ctx, key, ttl, &redislock.Options{RetryStrategy: redislock.LinearBackoff(pollEvery)})
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

// go-redsync/redsync with one pool: polls every pollEvery while it waits.
type redsyncLocker struct{ rs *redsync.Redsync }

func (r redsyncLocker) String() string { return "redsync" }
func (r redsyncLocker) close()         {}
func (r redsyncLocker) try(ctx context.Context, key string, ttl time.Duration) (func(context.Context) error, error) {
	m := r.rs.NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(1))
	if err := m.TryLockContext(ctx); err != nil {
		return nil, err
	}
	return unlockMutex(m), nil
}
func (r redsyncLocker) lock(ctx context.Context, key string, ttl time.Duration) (func(context.Context) error, error) {
	m := r.rs.NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(1<<30), redsync.WithRetryDelay(pollEvery))
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return unlockMutex(m), nil
}

func unlockMutex(m *redsync.Mutex) func(context.Context) error {
	return func(ctx context.Context) error {
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = fmt.Errorf("redsync: %s not unlocked", m.Name())
		}
		return err
	}
}

// The floor: what a careful hand-written go-redis lock costs. SET NX PX with
// a uuid token, and a compare-and-delete script; waiting polls every
// pollEvery.
type floorLocker struct{ rdb *redis.Client }

var floorRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

func (f floorLocker) String() string { return "go-redis-floor" }
func (f floorLocker) close()         {}
func (f floorLocker) try(ctx context.Context, key string, ttl time.Duration) (func(context.Context) error, error) {
	token := uuid.NewString()
	ok, err := f.rdb.SetNX(ctx, key, token, ttl).Result()
	switch {
	case err != nil:
		return nil, err
	case !ok:
		return nil, errBusy
	}
	return func(ctx context.Context) error {
		return floorRelease.Run(ctx, f.rdb, []string{key}, token).Err()
	}, nil
}
func (f floorLocker) lock(ctx context.Context, key string, ttl time.Duration) (func(context.Context) error, error) {
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		unlock, err := f.try(ctx, key, ttl)
		if !errors.Is(err, errBusy) {
			return unlock, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}
