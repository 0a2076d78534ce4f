package padlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
)

// WithMaxHold(2s) with a 600ms ttl, kept alive: renewing stops 2s after
// the acquire, the KeepAlive context ends with ErrMaxHold and ErrLost
// between 2.0s and 2.0s + ttl after it, a waiter gets the lock then, and
// Extend past the cap is ErrMaxHold. For a lock, a semaphore place, a
// shared hold, and on Redlock.
func TestWithMaxHold(t *testing.T) {
	const maxHold, ttl = 2 * time.Second, 600 * time.Millisecond
	// run: holder takes key with hold, kept alive; waiter waits with wait.
	run := func(t *testing.T, holder, waiter *padlock.Client, key string, hold, wait []padlock.Option) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		acquired := time.Now()
		l, err := holder.TryAcquire(ctx, key, ttl, append(hold, padlock.WithMaxHold(maxHold))...)
		require.NoError(t, err)
		kctx, stop := l.KeepAlive(ctx)
		defer stop()
		got := acquireLater(ctx, waiter, key, ttl, wait...)
		<-kctx.Done()
		ended := time.Since(acquired)
		cause := context.Cause(kctx)
		require.ErrorIs(t, cause, padlock.ErrMaxHold)
		require.ErrorIs(t, cause, padlock.ErrLost)
		assert.GreaterOrEqual(t, ended, maxHold, "not before the maximum")
		assert.Less(t, ended, maxHold+ttl, "at the lock's expiry, not later")
		require.ErrorIs(t, l.Extend(ctx, ttl), padlock.ErrMaxHold, "no Extend past the cap")
		w := <-got
		require.NoError(t, w.err, "a waiter gets the lock when it expires")
		assert.Less(t, time.Since(acquired), maxHold+ttl+time.Second)
		require.NoError(t, w.l.Release(ctx))
	}
	e := newReal(t, nil)
	semaphore := []padlock.Option{padlock.WithLimit(1)}
	for _, k := range []struct {
		name       string
		hold, wait []padlock.Option
	}{
		{"lock", nil, nil},
		{"semaphore", semaphore, semaphore},
		{"shared", []padlock.Option{padlock.WithShared()}, nil}, // a writer waits
	} {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			cs := moreClients(t, e, 2)
			run(t, cs[0], cs[1], "lock:"+t.Name(), k.hold, k.wait)
		})
	}
	t.Run("redlock", func(t *testing.T) {
		t.Parallel()
		r := startRedlock(t, 3)
		var clients []redis.UniversalClient
		for _, s := range r.srvs {
			rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
			t.Cleanup(func() { _ = rdb.Close() })
			clients = append(clients, rdb)
		}
		other := padlock.NewRedlock(clients)
		t.Cleanup(func() { _ = other.Close() })
		run(t, r.c, other, "lock:maxhold:redlock", nil, nil)
	})
}

// Bad input: a maximum of zero or less is ErrInvalid, and nothing is
// taken; a lock without WithMaxHold is kept alive past any such time.
func TestWithMaxHoldBadInput(t *testing.T) {
	e := newMini(t)
	for _, d := range []time.Duration{0, -time.Second} {
		_, err := e.c.TryAcquire(e.ctx, e.key, time.Second, padlock.WithMaxHold(d))
		require.ErrorIs(t, err, padlock.ErrInvalid)
		assert.False(t, e.mr.Exists(e.key), "nothing taken")
	}
	l, err := e.c.TryAcquire(e.ctx, e.key, time.Second, padlock.WithMaxHold(time.Hour))
	require.NoError(t, err)
	require.NoError(t, l.Extend(e.ctx, time.Second), "before the maximum, Extend works")
	require.NoError(t, l.Release(e.ctx))
	assert.False(t, errors.Is(padlock.ErrMaxHold, padlock.ErrLost), "two errors, matched together only as a cause")
}
