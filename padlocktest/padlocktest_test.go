package padlocktest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/padlocktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// servers are the two ways to get a server: in the process, and a real
// redis-server.
var servers = []struct {
	name string
	new  func(testing.TB, ...padlock.Option) (*padlock.Client, *padlocktest.Server)
}{
	{"New", padlocktest.New},
	{"NewRedis", padlocktest.NewRedis},
}

// every runs f on both kinds of server, in parallel.
func every(t *testing.T, f func(t *testing.T, locks *padlock.Client, srv *padlocktest.Server)) {
	for _, s := range servers {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			locks, srv := s.new(t)
			f(t, locks, srv)
		})
	}
}

// job stands for the code under test: a job that runs under a lock, and
// skips when another instance holds it.
func job(ctx context.Context, locks *padlock.Client, ran *int) error {
	return locks.TryDo(ctx, "lock:job", time.Minute, func(context.Context) error {
		*ran++
		return nil
	})
}

func TestSkipsWhenAnotherInstanceHolds(t *testing.T) {
	every(t, func(t *testing.T, locks *padlock.Client, srv *padlocktest.Server) {
		other, err := srv.Client().TryAcquire(t.Context(), "lock:job", time.Minute)
		require.NoError(t, err)
		ran := 0
		require.ErrorIs(t, job(t.Context(), locks, &ran), padlock.ErrNotAcquired)
		assert.Zero(t, ran, "skipped")
		require.NoError(t, other.Release(t.Context()))
		require.NoError(t, job(t.Context(), locks, &ran))
		assert.Equal(t, 1, ran)
	})
}

func TestExpireEndsTheLease(t *testing.T) {
	every(t, func(t *testing.T, locks *padlock.Client, srv *padlocktest.Server) {
		l, err := locks.TryAcquire(t.Context(), "lock:lease", 300*time.Millisecond)
		require.NoError(t, err)
		kctx, stop := l.KeepAlive(t.Context())
		defer stop()
		waiter := srv.Client()
		got := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			w, err := waiter.Acquire(ctx, "lock:lease", time.Minute)
			if err == nil {
				err = w.Release(ctx)
			}
			got <- err
		}()
		time.Sleep(50 * time.Millisecond) // the waiter queues
		srv.Expire("lock:lease")
		select {
		case <-kctx.Done():
		case <-time.After(2 * time.Second):
			t.Fatal("the lease did not end within a renewal")
		}
		require.ErrorIs(t, context.Cause(kctx), padlock.ErrLost)
		require.NoError(t, <-got, "the waiter was served")
		info, err := srv.Holder("lock:lease")
		require.NoError(t, err)
		assert.False(t, info.Held)
	})
}

func TestStealMakesTheHolderNotHeld(t *testing.T) {
	every(t, func(t *testing.T, locks *padlock.Client, srv *padlocktest.Server) {
		l, err := locks.TryAcquire(t.Context(), "lock:stolen", time.Minute)
		require.NoError(t, err)
		srv.Steal("lock:stolen")
		require.ErrorIs(t, l.Extend(t.Context(), time.Minute), padlock.ErrNotHeld)
		require.ErrorIs(t, l.Release(t.Context()), padlock.ErrNotHeld)
		info, err := srv.Holder("lock:stolen")
		require.NoError(t, err)
		assert.True(t, info.Held)
		assert.NotEqual(t, l.Token(), info.Token, "another holder")
		_, err = srv.Client().TryAcquire(t.Context(), "lock:stolen", time.Second)
		require.ErrorIs(t, err, padlock.ErrNotAcquired)

		sem, err := locks.TryAcquire(t.Context(), "lock:sem", time.Minute, padlock.WithLimit(2))
		require.NoError(t, err)
		srv.Steal("lock:sem")
		require.ErrorIs(t, sem.Release(t.Context()), padlock.ErrNotHeld)
		_, err = locks.TryAcquire(t.Context(), "lock:sem", time.Minute, padlock.WithLimit(2))
		require.ErrorIs(t, err, padlock.ErrNotAcquired, "every place taken")
	})
}

func TestDownIsAnOutageNotContention(t *testing.T) {
	every(t, func(t *testing.T, locks *padlock.Client, srv *padlocktest.Server) {
		held, err := locks.TryAcquire(t.Context(), "lock:held", time.Minute)
		require.NoError(t, err)
		srv.Down()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		_, err = locks.TryAcquire(ctx, "lock:down", time.Minute)
		require.Error(t, err)
		assert.False(t, errors.Is(err, padlock.ErrNotAcquired), "an outage is not contention: %v", err)
		srv.Up()
		l, err := locks.TryAcquire(t.Context(), "lock:down", time.Minute)
		require.NoError(t, err, "works again after Up")
		require.NoError(t, l.Release(t.Context()))
		require.NoError(t, held.Release(t.Context()), "what the server held stayed")
	})
}

func TestFastForward(t *testing.T) {
	every(t, func(t *testing.T, locks *padlock.Client, srv *padlocktest.Server) {
		l, err := locks.TryAcquire(t.Context(), "lock:hour", time.Hour, padlock.WithFencing())
		require.NoError(t, err)
		sem, err := locks.TryAcquire(t.Context(), "lock:sem", time.Hour, padlock.WithLimit(1))
		require.NoError(t, err)
		kept, err := locks.TryAcquire(t.Context(), "lock:day", time.Minute, padlock.WithMinHold(24*time.Hour))
		require.NoError(t, err)
		require.NoError(t, kept.Release(t.Context()))

		two, err := locks.TryAcquire(t.Context(), "lock:two-hours", 2*time.Hour)
		require.NoError(t, err)

		srv.FastForward(61 * time.Minute)
		info, err := srv.Holder("lock:two-hours")
		require.NoError(t, err)
		assert.True(t, info.Held, "59 minutes left")
		assert.Less(t, info.TTL, 60*time.Minute)
		require.NoError(t, two.Release(t.Context()))
		for _, key := range []string{"lock:hour", "lock:sem"} {
			info, err := srv.Holder(key)
			require.NoError(t, err)
			assert.False(t, info.Held, "%s gone after an hour", key)
		}
		require.ErrorIs(t, l.Extend(t.Context(), time.Hour), padlock.ErrNotHeld)
		require.ErrorIs(t, sem.Release(t.Context()), padlock.ErrNotHeld)
		again, err := locks.TryAcquire(t.Context(), "lock:hour", time.Hour, padlock.WithFencing())
		require.NoError(t, err)
		assert.Greater(t, again.Fence(), l.Fence(), "fences keep going up")
		_, err = locks.TryAcquire(t.Context(), "lock:day", time.Minute)
		require.ErrorIs(t, err, padlock.ErrNotAcquired, "its minimum is a day")
		srv.FastForward(23 * time.Hour)
		_, err = locks.TryAcquire(t.Context(), "lock:day", time.Minute)
		require.NoError(t, err, "a day later")
	})
}

// Tests that run in parallel each have a server of their own.
func TestParallelTestsDoNotShareLocks(t *testing.T) {
	for _, name := range []string{"a", "b"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			locks, _ := padlocktest.New(t)
			l, err := locks.TryAcquire(t.Context(), "lock:same", time.Minute)
			require.NoError(t, err, "the other test's lock is not here")
			time.Sleep(100 * time.Millisecond) // both hold at once
			require.NoError(t, l.Release(t.Context()))
		})
	}
}

// A test that forgets to release, or to stop a KeepAlive or a wait,
// leaves no goroutine behind (goleak, in TestMain, checks).
func TestForgottenLocksLeakNothing(t *testing.T) {
	locks, srv := padlocktest.New(t)
	l, err := locks.TryAcquire(t.Context(), "lock:forgotten", time.Minute)
	require.NoError(t, err)
	_, _ = l.KeepAlive(context.Background())
	waiter := srv.Client()
	go func() { _, _ = waiter.Acquire(context.Background(), "lock:forgotten", time.Minute) }()
	// The test ends with the waiter waiting (not before it starts: a
	// Client made after the test's cleanups ran would never be closed).
	require.Eventually(t, func() bool {
		info, err := srv.Holder("lock:forgotten")
		return err == nil && info.Waiting == 1
	}, 5*time.Second, 5*time.Millisecond)
}

// Check on the in-process server reports it as a test server; the lock
// cycle runs.
func TestCheckReportsATestServer(t *testing.T) {
	locks, _ := padlocktest.New(t)
	r, err := locks.Check(t.Context(), "lock:check")
	require.NoError(t, err)
	require.Len(t, r.Nodes, 1)
	assert.Equal(t, "miniredis", r.Nodes[0].Server)
	assert.False(t, r.HasDanger(), "%+v", r.Findings)
	require.Len(t, r.Findings, 1, "%+v", r.Findings)
	assert.Contains(t, r.Findings[0].Problem, "a test server")
	for _, st := range r.Cycle {
		assert.NoError(t, st.Err, st.Name)
	}
}

// Steal when someone waits: the waiter is the other holder.
func TestStealWithAWaiter(t *testing.T) {
	every(t, func(t *testing.T, locks *padlock.Client, srv *padlocktest.Server) {
		l, err := locks.TryAcquire(t.Context(), "lock:waited", time.Minute)
		require.NoError(t, err)
		got := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			w, err := srv.Client().Acquire(ctx, "lock:waited", time.Minute)
			if err == nil {
				err = w.Release(ctx)
			}
			got <- err
		}()
		require.Eventually(t, func() bool { info, err := srv.Holder("lock:waited"); return err == nil && info.Waiting == 1 },
			5*time.Second, 5*time.Millisecond)
		srv.Steal("lock:waited")
		require.ErrorIs(t, l.Release(t.Context()), padlock.ErrNotHeld)
		require.NoError(t, <-got, "the waiter took it")
	})
}
