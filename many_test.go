package padlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
)

func TestTryAcquireManyAllOrNone(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		a, b, c, d := e.key+":a", e.key+":b", e.key+":c", e.key+":d"
		l, err := e.c.TryAcquireMany(e.ctx, []string{a, b, c}, time.Minute, padlock.WithMetadata("batch"))
		require.NoError(t, err)
		assert.Equal(t, []string{a, b, c}, l.Keys())
		for _, k := range []string{a, b, c} {
			assert.Equal(t, l.Token()+" batch", unspanned(e.get(k)), k)
		}
		_, err = e.c.TryAcquireMany(e.ctx, []string{d, c}, time.Minute)
		require.ErrorIs(t, err, padlock.ErrNotAcquired)
		assert.Empty(t, e.get(d), "none taken when one is held")
		_, err = e.c.TryAcquire(e.ctx, b, time.Minute)
		require.ErrorIs(t, err, padlock.ErrNotAcquired, "each key is held")

		require.NoError(t, l.Extend(e.ctx, time.Hour))
		for _, k := range []string{a, b, c} {
			assert.Greater(t, e.pttl(k), 59*time.Minute, k)
		}
		ttl, err := l.TTL(e.ctx)
		require.NoError(t, err)
		assert.Greater(t, ttl, 59*time.Minute)
		require.NoError(t, l.Release(e.ctx))
		for _, k := range []string{a, b, c} {
			assert.Empty(t, e.get(k), k)
		}

		// One key taken over: the lock is no longer wholly ours.
		l, err = e.c.TryAcquireMany(e.ctx, []string{a, b}, time.Minute)
		require.NoError(t, err)
		require.NoError(t, e.raw.Set(e.ctx, b, "someone-else", time.Minute).Err())
		require.ErrorIs(t, l.Extend(e.ctx, time.Minute), padlock.ErrNotHeld)
		_, err = l.TTL(e.ctx)
		require.ErrorIs(t, err, padlock.ErrNotHeld)
		require.ErrorIs(t, l.Release(e.ctx), padlock.ErrNotHeld)
		assert.Empty(t, e.get(a), "our key is released")
		assert.Equal(t, "someone-else", e.get(b), "the other holder's key is untouched")
	})
}

func TestAcquireManyWaitsAndKeepsAlive(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	a, b := e.key+":a", e.key+":b"
	holder, err := e.c.TryAcquire(e.ctx, b, time.Minute)
	require.NoError(t, err)
	time.AfterFunc(100*time.Millisecond, func() { _ = holder.Release(context.Background()) })
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	l, err := e.c.AcquireMany(ctx, []string{a, b}, 300*time.Millisecond)
	require.NoError(t, err)

	kctx, stop := l.KeepAlive(e.ctx)
	time.Sleep(time.Second) // three ttls
	require.NoError(t, kctx.Err(), "kept alive: %v", context.Cause(kctx))
	assert.Equal(t, l.Token(), unspanned(e.get(a)))
	assert.Equal(t, l.Token(), unspanned(e.get(b)))
	stop()
	require.NoError(t, l.Release(e.ctx))
}

func TestAcquireManyBadInput(t *testing.T) {
	t.Parallel()
	e := newMini(t)
	tests := []struct {
		name string
		keys []string
		opts []padlock.Option
	}{
		{"no keys", nil, nil},
		{"empty key", []string{"a", ""}, nil},
		{"repeated key", []string{"a", "b", "a"}, nil},
		{"fencing", []string{"a", "b"}, []padlock.Option{padlock.WithFencing()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.c.TryAcquireMany(e.ctx, tt.keys, time.Minute, tt.opts...)
			require.ErrorIs(t, err, padlock.ErrInvalid)
			_, err = e.c.AcquireMany(e.ctx, tt.keys, time.Minute, tt.opts...)
			require.ErrorIs(t, err, padlock.ErrInvalid)
			assert.Empty(t, e.mr.Keys(), "nothing written")
		})
	}
}

// On a cluster the keys of one lock must share a slot: a clear error
// before any round trip, naming the fix; with a common hash tag it works.
func TestAcquireManyOnACluster(t *testing.T) {
	longOnly(t)
	t.Parallel() // starts servers of its own; mostly waits
	_, cc := startCluster(t)
	ctx := patientCtx(t)
	n := &counter{}
	cc.AddHook(n)
	c := padlock.New(cc)
	_, err := c.TryAcquireMany(ctx, []string{"order:42:items", "order:42:payment"}, time.Minute)
	require.ErrorIs(t, err, padlock.ErrInvalid)
	assert.Contains(t, err.Error(), "hash tag")
	trips, _ := n.reset()
	assert.Zero(t, trips, "refused before any round trip")

	l, err := c.TryAcquireMany(ctx, []string{"{order:42}:items", "{order:42}:payment"}, time.Minute)
	require.NoError(t, err)
	require.NoError(t, l.Extend(ctx, time.Minute))
	require.NoError(t, l.Release(ctx))
}
