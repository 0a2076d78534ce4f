package padlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
)

// neverPoll is a backoff so long that only a notification (or the
// holder's ttl) can wake a waiter within a test.
var neverPoll = padlock.WithBackoff(padlock.ExponentialBackoff(time.Hour, time.Hour))

func TestReleaseWakesAWaiter(t *testing.T) {
	both(t, func(t *testing.T, e *env) {
		holder, err := e.c.TryAcquire(e.ctx, e.key, time.Hour)
		require.NoError(t, err)
		time.AfterFunc(100*time.Millisecond, func() { _ = holder.Release(context.Background()) })

		ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
		defer cancel()
		l, err := e.c.Acquire(ctx, e.key, time.Minute, neverPoll)
		require.NoError(t, err, "only the release notification could have woken the waiter")
		require.NoError(t, l.Release(e.ctx))
	})
}

func TestWithoutNotificationsPolls(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	other := padlock.New(e.raw) // a release through the waiter's own Client would tell it in its reply
	holder, err := other.TryAcquire(e.ctx, e.key, time.Hour)
	require.NoError(t, err)
	time.AfterFunc(50*time.Millisecond, func() { _ = holder.Release(context.Background()) })

	// A waiter without notifications polls on its backoff, but at least
	// every 300ms, to keep its place in the queue: within 200ms it has not
	// looked again since its first attempt.
	ctx, cancel := context.WithTimeout(e.ctx, 200*time.Millisecond)
	defer cancel()
	_, err = e.c.Acquire(ctx, e.key, time.Minute, neverPoll, padlock.WithoutNotifications())
	require.ErrorIs(t, err, padlock.ErrNotAcquired, "without notifications the release goes unheard until the next poll")

	ctx, cancel = context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	l, err := e.c.Acquire(ctx, e.key, time.Minute, neverPoll, padlock.WithoutNotifications())
	require.NoError(t, err, "the lock is free (the first waiter passed on what it may have been handed)")
	t.Logf("acquired after %v", time.Since(start))
	require.NoError(t, l.Release(e.ctx))
}

// Waiters of one Client take the lock in the order they came, and each
// release costs one attempt, not one per waiter.
func TestWaitersAreServedInOrderOneAttemptPerRelease(t *testing.T) {
	both(t, func(t *testing.T, e *env) {
		const waiters = 6
		require.NoError(t, e.c.TryDo(e.ctx, e.key+":warm", time.Minute, func(context.Context) error { return nil }))
		holder, err := e.c.TryAcquire(e.ctx, e.key, time.Hour)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
		defer cancel()

		var (
			mu    sync.Mutex
			order []int
			wg    sync.WaitGroup
		)
		for i := range waiters {
			wg.Go(func() {
				l, err := e.c.Acquire(ctx, e.key, time.Hour, neverPoll)
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				assert.NoError(t, l.Release(e.ctx))
			})
			time.Sleep(50 * time.Millisecond) // let it queue before the next comes
		}
		e.n.reset()
		require.NoError(t, holder.Release(e.ctx))
		wg.Wait()
		assert.Equal(t, []int{0, 1, 2, 3, 4, 5}, order, "first come, first served")
		// Each handoff: one release, one attempt by the head.
		if scripts := e.scripts(); scripts > 2*waiters+1 {
			t.Errorf("%d script calls for %d handoffs: more than one attempt per release", scripts, waiters)
		}
	})
}

func TestCloseWakesWaiters(t *testing.T) {
	both(t, func(t *testing.T, e *env) {
		c := padlock.New(e.rdb)
		holder, err := c.TryAcquire(e.ctx, e.key, time.Hour)
		require.NoError(t, err)
		errs := make(chan error, 3)
		for range 3 {
			go func() {
				_, err := c.Acquire(e.ctx, e.key, time.Minute, neverPoll)
				errs <- err
			}()
		}
		time.Sleep(100 * time.Millisecond)
		require.NoError(t, c.Close())
		for range 3 {
			select {
			case err := <-errs:
				require.ErrorIs(t, err, padlock.ErrClosed)
				assert.NotErrorIs(t, err, padlock.ErrNotAcquired)
			case <-time.After(5 * time.Second):
				t.Fatal("a waiter was not woken by Close")
			}
		}
		_, err = c.Acquire(e.ctx, e.key, time.Minute)
		require.ErrorIs(t, err, padlock.ErrClosed)
		require.NoError(t, c.Close(), "idempotent")
		require.NoError(t, holder.Release(e.ctx), "locks stay usable after Close")
	})
}

// Waiters of different Clients (as of different processes) are served in
// the order they came: a release hands the lock to the first waiter queued
// in Redis, and the others do not take it meanwhile.
func TestWaitersAcrossClientsAreServedInOrder(t *testing.T) {
	both(t, func(t *testing.T, e *env) {
		holder, err := e.c.TryAcquire(e.ctx, e.key, time.Hour)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
		defer cancel()
		var (
			mu    sync.Mutex
			order []int
			wg    sync.WaitGroup
		)
		const clients = 4
		for i := range clients {
			c := padlock.New(e.rdb)
			defer c.Close()
			wg.Go(func() {
				l, err := c.Acquire(ctx, e.key, time.Hour, neverPoll)
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				time.Sleep(5 * time.Millisecond) // the others are woken meanwhile, and must not barge
				assert.NoError(t, l.Release(e.ctx))
			})
			time.Sleep(50 * time.Millisecond) // let it queue before the next comes
		}
		require.NoError(t, holder.Release(e.ctx))
		wg.Wait()
		assert.Equal(t, []int{0, 1, 2, 3}, order, "first come, first served, across clients")
	})
}

// A waiter that vanished while queued (its process died) delays the others
// by the hand-off grace, once; it does not block the lock.
func TestAVanishedWaiterDoesNotBlockTheLock(t *testing.T) {
	both(t, func(t *testing.T, e *env) {
		holder, err := e.c.TryAcquire(e.ctx, e.key, time.Hour)
		require.NoError(t, err)
		// A waiter queued long ago that will never come back.
		require.NoError(t, e.raw.ZAdd(e.ctx, queueKey(e.key), redis.Z{Score: 1, Member: "dead-waiter"}).Err())

		ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			l, err := e.c.Acquire(ctx, e.key, time.Minute)
			if err == nil {
				err = l.Release(e.ctx)
			}
			done <- err
		}()
		time.Sleep(50 * time.Millisecond)
		require.NoError(t, holder.Release(e.ctx))
		require.NoError(t, <-done, "the live waiter got the lock after the dead one's grace")
	})
}

// A waiter that gives up leaves the queue in Redis, and hands on a lock
// that a release had handed to it.
func TestAWaiterThatGivesUpLeavesTheQueue(t *testing.T) {
	e := newReal(t, nil)
	holder, err := e.c.TryAcquire(e.ctx, e.key, time.Hour)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(e.ctx, 200*time.Millisecond)
	defer cancel()
	_, err = padlock.New(e.rdb).Acquire(ctx, e.key, time.Minute, neverPoll)
	require.ErrorIs(t, err, padlock.ErrNotAcquired)
	n, err := e.raw.ZCard(e.ctx, queueKey(e.key)).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the waiter left the queue")
	require.NoError(t, holder.Release(e.ctx))
}

func TestCloseEndsKeepAlives(t *testing.T) {
	e := newReal(t, nil)
	c := padlock.New(e.rdb)
	l, err := c.TryAcquire(e.ctx, e.key, time.Minute)
	require.NoError(t, err)
	kctx, stop := l.KeepAlive(e.ctx)
	defer stop()
	require.NoError(t, c.Close())
	require.ErrorIs(t, context.Cause(kctx), padlock.ErrClosed, "Close ended the keep-alive")
	kctx2, stop2 := l.KeepAlive(e.ctx)
	defer stop2()
	require.ErrorIs(t, context.Cause(kctx2), padlock.ErrClosed, "no keep-alive after Close")
	assert.Equal(t, l.Token(), e.get(e.key), "Close releases nothing")
	require.NoError(t, l.Release(e.ctx), "the lock can still be released")
}
