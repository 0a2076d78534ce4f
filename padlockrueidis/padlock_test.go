package padlockrueidis_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/driver"
	"github.com/padlock-go/padlock/internal/redistest"
	"github.com/padlock-go/padlock/padlockrueidis"
)

// newLocks returns a padlock Client on a rueidis client of addrs, closed
// when the test ends (before the rueidis client).
func newLocks(t *testing.T, opt rueidis.ClientOption, addrs []string, opts ...padlock.Option) *padlock.Client {
	t.Helper()
	c := newClient(t, opt, addrs...)
	locks := padlockrueidis.New(c, opts...)
	t.Cleanup(func() { _ = locks.Close() })
	return locks
}

// deployments runs f on one server and on a Cluster of three masters.
func deployments(t *testing.T, f func(t *testing.T, addrs []string)) {
	t.Run("one server", func(t *testing.T) {
		f(t, []string{redistest.Start(t).Addr()})
	})
	t.Run("cluster", func(t *testing.T) {
		f(t, addrsOf(startCluster(t)))
	})
}

func TestLockCycle(t *testing.T) {
	t.Parallel() // mostly waits, on servers of its own
	deployments(t, func(t *testing.T, addrs []string) {
		ctx := context.Background()
		a := newLocks(t, rueidis.ClientOption{}, addrs, padlock.WithFencing())
		b := newLocks(t, rueidis.ClientOption{}, addrs, padlock.WithFencing())
		key := "cycle"

		l, err := a.TryAcquire(ctx, key, 10*time.Second)
		require.NoError(t, err)
		first := l.Fence()
		assert.Positive(t, first)
		_, err = b.TryAcquire(ctx, key, 10*time.Second)
		assert.ErrorIs(t, err, padlock.ErrNotAcquired)

		ttl, err := l.TTL(ctx)
		require.NoError(t, err)
		assert.Greater(t, ttl, 5*time.Second)
		require.NoError(t, l.Extend(ctx, 20*time.Second))
		ttl, err = l.TTL(ctx)
		require.NoError(t, err)
		assert.Greater(t, ttl, 10*time.Second)
		require.NoError(t, l.Release(ctx))
		assert.ErrorIs(t, l.Release(ctx), padlock.ErrNotHeld)

		l2, err := b.TryAcquire(ctx, key, 10*time.Second)
		require.NoError(t, err)
		assert.Greater(t, l2.Fence(), first)
		require.NoError(t, l2.Release(ctx))
	})
}

// A waiter of another Client is handed the lock by its release, by a
// message on its pub/sub connection.
func TestHandOff(t *testing.T) {
	t.Parallel() // mostly waits, on servers of its own
	deployments(t, func(t *testing.T, addrs []string) {
		ctx := context.Background()
		var handOffs atomic.Int32
		waiting := make(chan struct{}, 1)
		a := newLocks(t, rueidis.ClientOption{}, addrs, padlock.WithFencing())
		b := newLocks(t, rueidis.ClientOption{}, addrs, padlock.WithFencing(), padlock.WithObserver(&padlock.Observer{
			HandOff:   func(string) { handOffs.Add(1) },
			WaitStart: func(context.Context, string) { waiting <- struct{}{} }, // subscribed, and asleep
		}))
		key := "handoff"

		held, err := a.TryAcquire(ctx, key, time.Minute)
		require.NoError(t, err)
		got := make(chan *padlock.Lock, 1)
		go func() {
			l, err := b.Acquire(ctx, key, time.Minute)
			assert.NoError(t, err)
			got <- l
		}()
		<-waiting
		assert.Equal(t, 1, queued(t, a, key))
		require.NoError(t, held.Release(ctx))

		l := <-got
		require.NotNil(t, l)
		assert.Greater(t, l.Fence(), held.Fence())
		assert.Equal(t, int32(1), handOffs.Load(), "handed off by a message")
		require.NoError(t, l.Release(ctx))
	})
}

// queued returns how many wait for key, as Inspect tells.
func queued(t *testing.T, c *padlock.Client, key string) int {
	t.Helper()
	info, err := c.Inspect(context.Background(), key)
	require.NoError(t, err)
	return info.Waiting
}

func TestKeepAlive(t *testing.T) {
	t.Parallel() // mostly waits, on servers of its own
	deployments(t, func(t *testing.T, addrs []string) {
		ctx := context.Background()
		a := newLocks(t, rueidis.ClientOption{}, addrs)
		l, err := a.TryAcquire(ctx, "keepalive", 300*time.Millisecond)
		require.NoError(t, err)
		kept, stop := l.KeepAlive(ctx)
		time.Sleep(time.Second) // three ttls
		require.NoError(t, kept.Err(), "still held")
		ttl, err := l.TTL(ctx)
		require.NoError(t, err)
		assert.Positive(t, ttl)
		stop()
		require.NoError(t, l.Release(ctx))
	})
}

// The refusals of New: every call fails with ErrInvalid, and waits for
// nothing.
func TestNewRefuses(t *testing.T) {
	primary := redistest.Start(t)
	replica := startReplica(t, primary)
	ctx := context.Background()
	tests := []struct {
		name string
		c    func(t *testing.T) rueidis.Client
		want error
	}{
		{"nil", func(*testing.T) rueidis.Client { return nil }, padlock.ErrInvalid},
		{"SendToReplicas", func(t *testing.T) rueidis.Client {
			return newClient(t, rueidis.ClientOption{
				SendToReplicas: func(rueidis.Completed) bool { return true },
				Standalone:     rueidis.StandaloneOption{ReplicaAddress: []string{replica.Addr()}},
			}, primary.Addr())
		}, padlock.ErrInvalid},
		{"a replica", func(t *testing.T) rueidis.Client { return newClient(t, rueidis.ClientOption{}, replica.Addr()) }, padlock.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			locks := padlockrueidis.New(tt.c(t))
			defer locks.Close()
			_, err := locks.TryAcquire(ctx, "refused", time.Second)
			assert.ErrorIs(t, err, tt.want)
			_, err = locks.Acquire(ctx, "refused", time.Second)
			assert.ErrorIs(t, err, tt.want)
			_, err = locks.Inspect(ctx, "refused")
			assert.ErrorIs(t, err, tt.want)
			_, err = locks.Check(ctx, "lock:padlock-doctor")
			assert.ErrorIs(t, err, tt.want)

			rl := padlockrueidis.NewRedlock([]rueidis.Client{newClient(t, rueidis.ClientOption{}, primary.Addr()), tt.c(t)})
			defer rl.Close()
			_, err = rl.TryAcquire(ctx, "refused", time.Second)
			assert.ErrorIs(t, err, tt.want, "a Redlock with one such node")
		})
	}
}

func TestWithReplicas(t *testing.T) {
	primary := redistest.Start(t)
	startReplica(t, primary)
	ctx := context.Background()
	locks := newLocks(t, rueidis.ClientOption{}, []string{primary.Addr()}, padlock.WithReplicas(1, 5*time.Second))
	l, err := locks.TryAcquire(ctx, "replicas", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Extend(ctx, 10*time.Second))
	require.NoError(t, l.Release(ctx))

	none := newLocks(t, rueidis.ClientOption{}, []string{redistest.Start(t).Addr()}, padlock.WithReplicas(1, 100*time.Millisecond))
	_, err = none.TryAcquire(ctx, "replicas", 10*time.Second)
	assert.True(t, errors.Is(err, padlock.ErrNotReplicated), "%v", err)
}

// On a Redis whose memory is full (maxmemory with noeviction), an acquire
// fails with ErrOutOfMemory, in padlock's words as on go-redis: the root
// package reads the reply the adapter gives as a driver.ServerError. Its
// first sentence names no script; the reply, location and all, is still
// wrapped.
func TestOutOfMemoryIsSaidInPadlocksWords(t *testing.T) {
	s := redistest.Start(t)
	locks := newLocks(t, rueidis.ClientOption{}, []string{s.Addr()})
	s.FillMemory(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, tryErr := locks.TryAcquire(ctx, "lock:oom", time.Minute, padlock.WithFencing())
	_, waitErr := locks.Acquire(ctx, "lock:oom", time.Minute)
	for _, err := range []error{tryErr, waitErr} {
		require.ErrorIs(t, err, padlock.ErrOutOfMemory)
		assert.NotErrorIs(t, err, padlock.ErrNotAcquired)
		first, _, _ := strings.Cut(err.Error(), ". ")
		assert.Contains(t, first, "Redis is out of memory")
		assert.Contains(t, first, "raise maxmemory or free memory")
		assert.NotContains(t, first, "user_script")
		var reply driver.ServerError
		require.ErrorAs(t, err, &reply)
		assert.Contains(t, string(reply), "OOM command not allowed")
		assert.Contains(t, string(reply), "user_script")
	}
	assert.Zero(t, s.Client().Exists(ctx, "lock:oom").Val())
}
