package padlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/redistest"
)

// renewals counts the script calls e's client made since the last reset:
// with no other caller on the client, those are KeepAlive's renewals.
func (e *env) renewals() int { return e.scripts() }

// scripts counts the script calls e's client made since the last reset.
func (e *env) scripts() int {
	_, cmds := e.n.reset()
	n := 0
	for _, c := range cmds {
		if c == "evalsha" || c == "eval" {
			n++
		}
	}
	return n
}

func TestKeepAliveKeepsTheLockPastItsTTL(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	l, err := e.c.TryAcquire(e.ctx, e.key, 300*time.Millisecond)
	require.NoError(t, err)
	e.n.reset()
	kctx, stop := l.KeepAlive(e.ctx)

	time.Sleep(time.Second) // more than three ttls
	require.NoError(t, kctx.Err(), "the lease is still held")
	assert.Equal(t, l.Token(), unspanned(e.get(e.key)))
	n := e.renewals()
	// About one renewal per ttl/3 = 100ms; a wide band, as the machine may be loaded.
	if n < 4 || n > 20 {
		t.Errorf("%d renewals in 1s with ttl 300ms, want about 10", n)
	}
	_, err = e.c.TryAcquire(e.ctx, e.key, time.Second)
	require.ErrorIs(t, err, padlock.ErrNotAcquired)

	stop()
	stop() // idempotent
	require.ErrorIs(t, context.Cause(kctx), context.Canceled)
	assertRenewingStopped(t, e, l, 300*time.Millisecond, "renewing went on after stop")
}

func TestKeepAliveReportsLossWhenTheLockIsTaken(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		l, err := e.c.TryAcquire(e.ctx, e.key, 150*time.Millisecond)
		require.NoError(t, err)
		kctx, stop := l.KeepAlive(e.ctx)
		defer stop()
		// Someone deletes the lock and another holder takes it.
		require.NoError(t, e.raw.Set(e.ctx, e.key, "someone-else", time.Minute).Err())

		waitDone(t, kctx, 5*time.Second)
		cause := context.Cause(kctx)
		require.ErrorIs(t, cause, padlock.ErrLost)
		assert.Contains(t, cause.Error(), "no longer ours")
		assert.Equal(t, "someone-else", e.get(e.key), "the new holder's lock is untouched")
		require.ErrorIs(t, l.Release(e.ctx), padlock.ErrNotHeld)

		// A lost lock stays lost.
		kctx2, stop2 := l.KeepAlive(e.ctx)
		defer stop2()
		require.ErrorIs(t, context.Cause(kctx2), padlock.ErrLost)
	})
}

func TestKeepAliveReportsLossFromExtendAndTTL(t *testing.T) {
	t.Parallel()
	e := newMini(t)
	for _, probe := range []string{"Extend", "TTL"} {
		l, err := e.c.TryAcquire(e.ctx, e.key+probe, time.Minute)
		require.NoError(t, err)
		kctx, stop := l.KeepAlive(e.ctx)
		e.mr.Del(e.key + probe)
		if probe == "Extend" {
			require.ErrorIs(t, l.Extend(e.ctx, time.Minute), padlock.ErrNotHeld)
		} else {
			_, err := l.TTL(e.ctx)
			require.ErrorIs(t, err, padlock.ErrNotHeld)
		}
		require.ErrorIs(t, context.Cause(kctx), padlock.ErrLost, "%s found the lock gone; KeepAlive's context must know at once", probe)
		stop()
	}
}

// With Redis gone, the KeepAlive context ends no later than the lock's
// local deadline, which is before Redis would expire the lock.
func TestKeepAliveLostByLocalDeadlineWhenRedisStops(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	const ttl = 600 * time.Millisecond
	l, err := e.c.TryAcquire(e.ctx, e.key, ttl)
	require.NoError(t, err)
	kctx, stop := l.KeepAlive(e.ctx)
	defer stop()
	lost := whenDone(kctx)

	time.Sleep(ttl / 2) // a renewal or so
	require.NoError(t, kctx.Err())
	e.srv.Stop()
	waitDone(t, kctx, 10*time.Second)

	cause := context.Cause(kctx)
	require.ErrorIs(t, cause, padlock.ErrLost)
	assert.Contains(t, cause.Error(), "local deadline")
	at := lost(t)
	assertLostByDeadline(t, at, l.Deadline())
	assert.False(t, at.Before(l.Deadline()), "lost before the local deadline (%v early)", l.Deadline().Sub(at))
}

// assertRenewingStopped checks that no renewal of l reaches Redis for
// wait (longer than l's ttl), and that l has therefore expired.
func assertRenewingStopped(t *testing.T, e *env, l *padlock.Lock, wait time.Duration, msg string) {
	t.Helper()
	e.n.reset()
	time.Sleep(wait)
	assert.Zero(t, e.renewals(), msg)
	require.ErrorIs(t, l.Release(e.ctx), padlock.ErrNotHeld, "not renewed, so it expired")
}

// whenDone records when ctx is done; the returned function waits for that
// and returns it.
func whenDone(ctx context.Context) func(t *testing.T) time.Time {
	var at atomic.Pointer[time.Time]
	context.AfterFunc(ctx, func() { now := time.Now(); at.Store(&now) })
	return func(t *testing.T) time.Time {
		t.Helper()
		require.Eventually(t, func() bool { return at.Load() != nil }, time.Second, time.Millisecond)
		return *at.Load()
	}
}

// assertLostByDeadline checks that a lease ended at at, no later than its
// local deadline. The loss is a timer at the deadline: the slack is for
// scheduling on a loaded machine, not for a renewal's timeouts (go-redis
// spends about 1.7s on a refused connection).
func assertLostByDeadline(t *testing.T, at, deadline time.Time) {
	t.Helper()
	if late := at.Sub(deadline); late > 250*time.Millisecond {
		t.Errorf("lost %v after the local deadline", late)
	}
}

func TestKeepAliveSurvivesARestartWithPersistence(t *testing.T) {
	longOnly(t)
	t.Parallel() // starts servers of its own; mostly waits
	e := newReal(t, []redistest.Option{redistest.WithAOF()})
	l, err := e.c.TryAcquire(e.ctx, e.key, 3*time.Second, padlock.WithFencing())
	require.NoError(t, err)
	kctx, stop := l.KeepAlive(e.ctx)
	defer stop()

	e.srv.Restart()
	time.Sleep(4 * time.Second) // past the ttl: only renewals keep it
	require.NoError(t, kctx.Err(), "lost over a restart that kept the data: %v", context.Cause(kctx))
	assert.Equal(t, l.Token(), unspanned(e.get(e.key)))
	assert.Equal(t, "1", e.get(fenceKey(e.key)), "the fence counter survived")
	require.NoError(t, l.Release(e.ctx))
	require.ErrorIs(t, context.Cause(kctx), context.Canceled)
}

func TestKeepAliveReportsLossAfterARestartWithoutPersistence(t *testing.T) {
	t.Parallel() // starts servers of its own; mostly waits
	e := newReal(t, nil)
	l, err := e.c.TryAcquire(e.ctx, e.key, 3*time.Second)
	require.NoError(t, err)
	kctx, stop := l.KeepAlive(e.ctx)
	defer stop()

	e.srv.Restart() // comes back empty
	waitDone(t, kctx, 10*time.Second)
	cause := context.Cause(kctx)
	require.ErrorIs(t, cause, padlock.ErrLost)
	assert.Contains(t, cause.Error(), "no longer ours", "Redis answered, so this is not a deadline loss")
	require.ErrorIs(t, l.Release(e.ctx), padlock.ErrNotHeld)
}

func TestReleaseStopsKeepAlive(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		// Renewed every 200ms; a loaded machine (CI compiles beside the
		// tests) may hold one up a good part of that.
		const ttl = 600 * time.Millisecond
		l, err := e.c.TryAcquire(e.ctx, e.key, ttl)
		require.NoError(t, err)
		kctx, stop := l.KeepAlive(e.ctx)
		defer stop()
		time.Sleep(ttl/3 + ttl/6) // past a renewal
		require.NoError(t, l.Release(e.ctx))
		require.ErrorIs(t, context.Cause(kctx), context.Canceled, "Release ended the KeepAlive")

		e.n.reset()
		time.Sleep(ttl/3 + ttl/6)
		assert.Zero(t, e.renewals(), "a renewal after Release")

		kctx2, stop2 := l.KeepAlive(e.ctx)
		defer stop2()
		require.ErrorIs(t, context.Cause(kctx2), padlock.ErrNotHeld, "no keep-alive for a released lock")
	})
}

// Across 1,000 short leases (50ms ttl, renewed every ~17ms), no renewal
// reaches Redis after Release: PTTL, which the extend script runs to keep
// the hold's span (moveHold), is never run once every lock is released.
func TestNoRenewalAfterRelease(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	pttls := func() int64 { return redistest.Calls(t, e.raw, "pttl") }
	for i := range 1000 {
		// Acquire: the last cycle's Release may have timed out (below),
		// leaving the key to expire.
		l, err := e.c.Acquire(e.ctx, e.key, 50*time.Millisecond)
		require.NoError(t, err)
		_, stop := l.KeepAlive(e.ctx)
		if i%10 == 0 {
			time.Sleep(time.Duration(i%40) * time.Millisecond) // sometimes past a renewal or two
		}
		// Under load (CI runs slow tests beside it), a renewal of a 50ms
		// lock can come after its local deadline: Release then says so;
		// or Release's own round trip outlives the local deadline it was
		// bounded by (a renewal landing meanwhile may move that deadline
		// on, so it is not compared here). What this test checks is that
		// nothing renews after Release.
		if err := l.Release(e.ctx); err != nil && !errors.Is(err, padlock.ErrNotHeld) {
			require.ErrorIs(t, err, context.DeadlineExceeded, "cycle %d", i)
		}
		stop()
	}
	before := pttls()
	require.Positive(t, before, "the renewals ran PTTL")
	time.Sleep(100 * time.Millisecond)
	assert.Equal(t, before, pttls(), "PTTL after every lock was released: a renewal")
	assert.Empty(t, e.get(e.key))
}

func TestKeepAliveSharedByTwoCallers(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	const ttl = 600 * time.Millisecond // renewed every 200ms: room for a loaded machine
	l, err := e.c.TryAcquire(e.ctx, e.key, ttl)
	require.NoError(t, err)
	ctx1, stop1 := l.KeepAlive(e.ctx)
	ctx2, stop2 := l.KeepAlive(e.ctx)
	time.Sleep(ttl / 6)
	stop1()
	require.ErrorIs(t, context.Cause(ctx1), context.Canceled)
	e.n.reset()
	time.Sleep(ttl + ttl/3)
	require.NoError(t, ctx2.Err(), "the other KeepAlive still holds the lease")
	assert.Positive(t, e.renewals(), "renewing went on for the second caller")
	assert.Equal(t, l.Token(), unspanned(e.get(e.key)))
	stop2()
	assertRenewingStopped(t, e, l, ttl, "renewing went on after both stopped")
}

func TestKeepAliveEndsWithItsParentContext(t *testing.T) {
	e := newReal(t, nil)
	l, err := e.c.TryAcquire(e.ctx, e.key, 150*time.Millisecond)
	require.NoError(t, err)
	parent, cancel := context.WithCancelCause(e.ctx)
	errShutdown := errors.New("shutting down")
	kctx, stop := l.KeepAlive(parent)
	defer stop()
	cancel(errShutdown)
	waitDone(t, kctx, time.Second)
	require.ErrorIs(t, context.Cause(kctx), errShutdown)
	time.Sleep(20 * time.Millisecond) // let the renewer see it
	assertRenewingStopped(t, e, l, 200*time.Millisecond, "renewing went on after the parent ended")
}

func TestKeepAliveStopWaitsForTheRenewer(t *testing.T) {
	e := newReal(t, nil)
	require.NoError(t, e.rdb.Ping(e.ctx).Err())
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	l, err := e.c.TryAcquire(e.ctx, e.key, 300*time.Millisecond)
	require.NoError(t, err)
	_, stop := l.KeepAlive(e.ctx)
	time.Sleep(150 * time.Millisecond) // past a renewal
	// stop returns only when the renewer has exited: goleak finds nothing.
	stop()
	require.NoError(t, l.Release(e.ctx))
}

func TestTryDo(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		errJob := errors.New("job failed")
		runs := 0
		err := e.c.TryDo(e.ctx, e.key, time.Minute, func(ctx context.Context) error {
			runs++
			require.NoError(t, ctx.Err())
			l := padlock.LockFromContext(ctx)
			require.NotNil(t, l)
			assert.Equal(t, l.Token(), unspanned(e.get(e.key)), "fn runs holding the lock")
			assert.Positive(t, l.Fence())

			// Meanwhile the lock is busy for everyone else.
			err := e.c.TryDo(e.ctx, e.key, time.Minute, func(context.Context) error {
				t.Error("ran while the lock was held")
				return nil
			})
			require.ErrorIs(t, err, padlock.ErrNotAcquired)
			return errJob
		}, padlock.WithFencing())
		require.ErrorIs(t, err, errJob)
		assert.NotErrorIs(t, err, padlock.ErrLost)
		assert.Equal(t, 1, runs)
		assert.Empty(t, e.get(e.key), "released after fn")
		assert.Nil(t, padlock.LockFromContext(e.ctx))

		require.NoError(t, e.c.TryDo(e.ctx, e.key, time.Minute, func(context.Context) error { return nil }))
	})
}

func TestDoReportsALostLock(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		errStopped := errors.New("stopped early")
		err := e.c.Do(e.ctx, e.key, 150*time.Millisecond, func(ctx context.Context) error {
			require.NoError(t, e.raw.Set(e.ctx, e.key, "thief", time.Minute).Err())
			select {
			case <-ctx.Done():
				return errStopped
			case <-time.After(5 * time.Second):
				return nil
			}
		})
		require.ErrorIs(t, err, padlock.ErrLost)
		require.ErrorIs(t, err, errStopped, "fn's error is kept")
		assert.Equal(t, "thief", e.get(e.key), "Do's release left the new holder alone")
	})
}

func TestDoReleasesWhenFnPanics(t *testing.T) {
	t.Parallel()
	e := newMini(t)
	func() {
		defer func() { assert.Equal(t, "boom", recover()) }()
		_ = e.c.Do(e.ctx, e.key, time.Minute, func(context.Context) error { panic("boom") })
	}()
	assert.False(t, e.mr.Exists(e.key), "the lock was left held after a panic")
}

func TestDoWaitsForTheHolder(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		l, err := e.c.TryAcquire(e.ctx, e.key, time.Minute)
		require.NoError(t, err)
		time.AfterFunc(50*time.Millisecond, func() { _ = l.Release(context.Background()) })
		ran := false
		require.NoError(t, e.c.Do(e.ctx, e.key, time.Minute, func(context.Context) error {
			ran = true
			return nil
		}, padlock.WithBackoff(padlock.ExponentialBackoff(5*time.Millisecond, 20*time.Millisecond))))
		assert.True(t, ran)

		// A Do whose wait ends does not run fn.
		l, err = e.c.TryAcquire(e.ctx, e.key, time.Minute)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(e.ctx, 50*time.Millisecond)
		defer cancel()
		err = e.c.Do(ctx, e.key, time.Minute, func(context.Context) error {
			t.Error("fn ran without the lock")
			return nil
		})
		require.ErrorIs(t, err, padlock.ErrNotAcquired)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.NoError(t, l.Release(e.ctx))
	})
}

func TestCloseEndsKeepAlives(t *testing.T) {
	t.Parallel()
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
	assert.Equal(t, l.Token(), unspanned(e.get(e.key)), "Close releases nothing")
	require.NoError(t, l.Release(e.ctx), "the lock can still be released")
}

// An outage shorter than a hold's minimum does not end its KeepAlive: a
// 300ms lock taken WithMinHold(2s), with Redis paused (SIGSTOP) for 700ms,
// over two ttls, is kept alive through it, as its Deadline says (Redis
// holds the key by its token until the minimum), and after the minimum by
// its renewals.
func TestKeepAliveUnderAMinimumOutlivesAnOutage(t *testing.T) {
	t.Parallel() // mostly waits, on a server of its own
	e := newReal(t, nil)
	const ttl, minHold = 300 * time.Millisecond, 2 * time.Second
	sent := time.Now()
	l, err := e.c.TryAcquire(e.ctx, e.key, ttl, padlock.WithMinHold(minHold))
	require.NoError(t, err)
	kctx, stop := l.KeepAlive(e.ctx)
	defer stop()
	assert.True(t, l.Deadline().After(sent.Add(minHold-50*time.Millisecond)), "the Deadline counts the minimum")

	e.srv.Pause()
	defer e.srv.Resume()
	time.Sleep(700 * time.Millisecond)
	e.srv.Resume()
	require.NoError(t, kctx.Err(), "ended by an outage shorter than the minimum: %v", context.Cause(kctx))
	time.Sleep(time.Until(sent.Add(minHold + ttl)))
	require.NoError(t, kctx.Err(), "renewed after the outage: %v", context.Cause(kctx))
	assert.Equal(t, l.Token(), unspanned(e.get(e.key)))
	stop()
	require.NoError(t, l.Release(e.ctx))
}
