package padlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
)

func TestExponentialBackoff(t *testing.T) {
	tests := []struct {
		name     string
		min, max time.Duration
		attempt  int
		lo, hi   time.Duration
	}{
		{"first", 8 * time.Millisecond, time.Second, 0, 4 * time.Millisecond, 8 * time.Millisecond},
		{"doubles", 8 * time.Millisecond, time.Second, 3, 32 * time.Millisecond, 64 * time.Millisecond},
		{"capped", 8 * time.Millisecond, time.Second, 20, 500 * time.Millisecond, time.Second},
		{"no overflow", 8 * time.Millisecond, time.Second, 1000, 500 * time.Millisecond, time.Second},
		{"negative attempt", 8 * time.Millisecond, time.Second, -1, 500 * time.Millisecond, time.Second},
		{"min floor", 0, 0, 0, 500 * time.Microsecond, time.Millisecond},
		{"max under min", 10 * time.Millisecond, time.Millisecond, 5, 5 * time.Millisecond, 10 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := padlock.ExponentialBackoff(tt.min, tt.max)
			seen := map[time.Duration]bool{}
			for range 200 {
				d := b(tt.attempt)
				if d < tt.lo || d > tt.hi {
					t.Fatalf("b(%d) = %v, want in [%v, %v]", tt.attempt, d, tt.lo, tt.hi)
				}
				seen[d] = true
			}
			assert.Greater(t, len(seen), 10, "jittered")
		})
	}
}

// One Backoff value shared by many goroutines: stateless, so no race.
func TestBackoffIsSharable(t *testing.T) {
	b := padlock.ExponentialBackoff(time.Millisecond, time.Second)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range 1000 {
				if d := b(i % 12); d <= 0 {
					t.Errorf("b(%d) = %v", i%12, d)
				}
			}
		})
	}
	wg.Wait()
}

// A waiter must not wait out its backoff when the holder's lock expires
// sooner: the failed attempt tells it the remaining ttl.
func TestAcquireWakesWhenTheHolderExpires(t *testing.T) {
	e := newReal(t, nil)
	_, err := e.c.TryAcquire(e.ctx, e.key, 200*time.Millisecond)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	slow := padlock.WithBackoff(padlock.ExponentialBackoff(time.Minute, time.Minute))
	l, err := e.c.Acquire(ctx, e.key, time.Second, slow)
	require.NoError(t, err, "a one-minute backoff would have outlasted the 5s context")
	require.NoError(t, l.Release(e.ctx))
}

func TestAcquireDoesNotBusyLoop(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		warm, err := e.c.Acquire(e.ctx, e.key+":warm", time.Minute) // load the scripts
		require.NoError(t, err)
		require.NoError(t, warm.Release(e.ctx))
		holder, err := e.c.TryAcquire(e.ctx, e.key, time.Minute)
		require.NoError(t, err)
		time.AfterFunc(time.Second, func() { _ = holder.Release(context.Background()) })
		e.n.reset()
		l, err := e.c.Acquire(e.ctx, e.key, time.Minute)
		require.NoError(t, err)
		attempts := e.scripts() - 1 // the holder's release
		// Default backoff: 8ms doubling, jittered, to 512ms: about 8 attempts in 1s.
		if attempts > 12 {
			t.Errorf("%d attempts while waiting 1s: polling too hard", attempts)
		}
		assert.GreaterOrEqual(t, attempts, 2)
		require.NoError(t, l.Release(e.ctx))
	})
}

func TestAcquireWhenTheContextEnds(t *testing.T) {
	both(t, func(t *testing.T, e *env) {
		holder, err := e.c.TryAcquire(e.ctx, e.key, time.Minute)
		require.NoError(t, err)

		ctx, cancel := context.WithTimeout(e.ctx, 100*time.Millisecond)
		defer cancel()
		_, err = e.c.Acquire(ctx, e.key, time.Second)
		require.ErrorIs(t, err, padlock.ErrNotAcquired)
		require.ErrorIs(t, err, context.DeadlineExceeded)

		errTired := errors.New("tired of waiting")
		ctx, cancel = context.WithTimeoutCause(e.ctx, 50*time.Millisecond, errTired)
		defer cancel()
		_, err = e.c.Acquire(ctx, e.key, time.Second)
		require.ErrorIs(t, err, padlock.ErrNotAcquired)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorIs(t, err, errTired, "the context's cause is kept")

		// A context that ended before the call: no round trip, and no
		// claim of contention.
		ctx, cancel = context.WithCancel(e.ctx)
		cancel()
		e.n.reset()
		_, err = e.c.Acquire(ctx, e.key, time.Second)
		require.ErrorIs(t, err, context.Canceled)
		assert.NotErrorIs(t, err, padlock.ErrNotAcquired)
		_, err = e.c.TryAcquire(ctx, e.key, time.Second)
		require.ErrorIs(t, err, context.Canceled)
		trips, _ := e.n.reset()
		assert.Zero(t, trips)
		assert.Equal(t, holder.Token(), e.get(e.key))
	})
}

// If the waiter's context ends just as Redis hands it the lock (the reply
// is lost to the cancellation), the lock must not stay held by nobody.
// A waiter whose attempt takes the lock as its wait ends does not leave it
// held. (A key with a brace but no hash tag: its waiters attempt, since
// they cannot queue in Redis.)
func TestAcquireCancelledWhileTakingTheLock(t *testing.T) {
	both(t, func(t *testing.T, e *env) {
		key := e.key + "{x"
		// The holder uses a client of its own: the hook below is for the waiter's calls.
		holder, err := padlock.New(e.raw).TryAcquire(e.ctx, key, time.Minute)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(e.ctx)
		defer cancel()
		e.rdb.AddHook(&cancelOnAcquire{cancel: cancel})
		time.AfterFunc(30*time.Millisecond, func() { _ = holder.Release(context.Background()) })

		_, err = e.c.Acquire(ctx, key, time.Minute)
		require.ErrorIs(t, err, padlock.ErrNotAcquired)
		require.ErrorIs(t, err, context.Canceled)
		assert.Empty(t, e.get(key), "the lock taken as the wait ended is not left held")
	})
}

// A waiter whose wait ends at the moment a release hands it the lock
// passes the lock on to the next waiter, in another Client, at once.
func TestAcquireCancelledWhileHandedTheLock(t *testing.T) {
	both(t, func(t *testing.T, e *env) {
		other := padlock.New(e.raw)
		t.Cleanup(func() { _ = other.Close() })
		holder, err := other.TryAcquire(e.ctx, e.key, time.Minute)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(e.ctx)
		defer cancel()
		waiting := make(chan struct{})
		cancelAtHandOff := padlock.WithObserver(&padlock.Observer{
			WaitStart: func(context.Context, string) { close(waiting) },
			HandOff:   func(string) { cancel() },
		})

		first := make(chan error, 1)
		go func() {
			_, err := e.c.Acquire(ctx, e.key, time.Minute, cancelAtHandOff, neverPoll)
			first <- err
		}()
		<-waiting // queued, and done attempting
		waitFor(t, e, 1)
		second := acquireLater(e.ctx, other, e.key, time.Minute, neverPoll)
		waitFor(t, e, 2)

		require.NoError(t, holder.Release(e.ctx))
		err = <-first
		require.ErrorIs(t, err, padlock.ErrNotAcquired)
		require.ErrorIs(t, err, context.Canceled)
		select {
		case w := <-second:
			require.NoError(t, w.err)
			assert.Equal(t, w.l.Token(), e.get(e.key), "the next waiter holds it")
			require.NoError(t, w.l.Release(e.ctx))
		case <-time.After(5 * time.Second):
			t.Fatal("the lock was not passed on (only that could wake the second waiter)")
		}
	})
}

// waitFor waits until n clients wait in Redis for e.key.
func waitFor(t *testing.T, e *env, n int) {
	t.Helper()
	waitForOn(t, e.c, e.key, n)
}

// waitForOn waits until n clients wait in Redis for key, as c sees it.
func waitForOn(t *testing.T, c *padlock.Client, key string, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		info, err := c.Inspect(t.Context(), key)
		return err == nil && info.Waiting == n
	}, 5*time.Second, 5*time.Millisecond, "%d waiters of %q queued", n, key)
}

// cancelOnAcquire is a hook that, when an acquire script succeeds, cancels
// the caller's context and reports the cancellation instead of the reply.
type cancelOnAcquire struct {
	passHook // dials and pipelines pass through
	cancel   context.CancelFunc
	fired    atomic.Bool
}

func (h *cancelOnAcquire) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		c, ok := cmd.(*redis.Cmd)
		if err != nil || !ok || !isScript(cmd) {
			return err
		}
		if acquired(c) && h.fired.CompareAndSwap(false, true) {
			h.cancel()
			cmd.SetErr(context.Canceled)
			return context.Canceled
		}
		return err
	}
}

// acquired reports whether an acquire script's reply means the lock was
// taken: a fence >= 0 from the single attempt, {1, fence} from a waiting one.
func acquired(c *redis.Cmd) bool {
	if v, err := c.Slice(); err == nil {
		return len(v) > 0 && v[0] == int64(1)
	}
	n, err := c.Int64()
	return err == nil && n >= 0
}

// 32 goroutines contend for one lock: no two are ever inside at once (a
// read-pause-write counter loses no update) and the fences each holder
// sees only go up.
func TestContention(t *testing.T) {
	both(t, func(t *testing.T, e *env) {
		const goroutines, rounds = 32, 8
		var (
			counter, inside, lastFence atomic.Int64
			wg                         sync.WaitGroup
		)
		fast := padlock.WithBackoff(padlock.ExponentialBackoff(time.Millisecond, 20*time.Millisecond))
		ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
		defer cancel()
		errs := make(chan error, goroutines*rounds)
		for g := range goroutines {
			wg.Go(func() {
				for r := range rounds {
					l, err := e.c.Acquire(ctx, e.key, 10*time.Second, padlock.WithFencing(), fast)
					if err != nil {
						errs <- fmt.Errorf("goroutine %d round %d: %w", g, r, err)
						return
					}
					if n := inside.Add(1); n != 1 {
						errs <- fmt.Errorf("%d holders at once", n)
					}
					if f, last := l.Fence(), lastFence.Load(); f <= last {
						errs <- fmt.Errorf("fence %d after %d", f, last)
					}
					lastFence.Store(l.Fence())
					v := counter.Load()
					time.Sleep(100 * time.Microsecond)
					counter.Store(v + 1)
					inside.Add(-1)
					if err := l.Release(ctx); err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		assert.Equal(t, int64(goroutines*rounds), counter.Load(), "lost updates: two holders overlapped")
		assert.Equal(t, int64(goroutines*rounds), lastFence.Load())
	})
}
