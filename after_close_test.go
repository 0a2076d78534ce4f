package padlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
)

// After Close, every call that would take, wait for, extend or keep alive
// a lock returns ErrClosed before any round trip, and takes nothing; a
// lock taken before Close is still released, and the calls that only
// read still read.
func TestNoCallOnAClosedClientTakesAnything(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		ctx := e.ctx
		held, err := e.c.TryAcquire(ctx, e.key, time.Minute)
		require.NoError(t, err)
		kept, err := e.c.TryAcquire(ctx, e.key+":kept", time.Minute)
		require.NoError(t, err)
		lead, err := e.c.Campaign(ctx, e.key+":lead", time.Minute, "me")
		require.NoError(t, err)
		require.NoError(t, e.c.Close())

		free := e.key + ":free" // what the calls would take
		ran := false
		fn := func(context.Context) error { ran = true; return nil }
		tests := []struct {
			name string
			call func() error
		}{
			{"TryAcquire", func() error { _, err := e.c.TryAcquire(ctx, free, time.Minute); return err }},
			{"Acquire", func() error { _, err := e.c.Acquire(ctx, free, time.Minute); return err }},
			{"TryAcquire WithLimit", func() error { _, err := e.c.TryAcquire(ctx, free, time.Minute, padlock.WithLimit(2)); return err }},
			{"Acquire WithShared", func() error { _, err := e.c.Acquire(ctx, free, time.Minute, padlock.WithShared()); return err }},
			{"TryDo", func() error { return e.c.TryDo(ctx, free, time.Minute, fn) }},
			{"Do", func() error { return e.c.Do(ctx, free, time.Minute, fn) }},
			{"TryAcquireMany", func() error {
				_, err := e.c.TryAcquireMany(ctx, []string{free, free + ":2"}, time.Minute)
				return err
			}},
			{"AcquireMany", func() error { _, err := e.c.AcquireMany(ctx, []string{free, free + ":2"}, time.Minute); return err }},
			{"Campaign", func() error { _, err := e.c.Campaign(ctx, free, time.Minute, "me"); return err }},
			{"Lead", func() error { return e.c.Lead(ctx, free, time.Minute, "me", fn) }},
			{"Resume", func() error { _, err := e.c.Resume(ctx, held.Key(), held.Token()); return err }},
			{"Extend", func() error { return held.Extend(ctx, time.Hour) }},
			{"KeepAlive", func() error {
				kctx, stop := held.KeepAlive(ctx)
				defer stop()
				return context.Cause(kctx)
			}},
			{"Proclaim", func() error { return lead.Proclaim(ctx, "other") }},
			{"Check", func() error { _, err := e.c.Check(ctx, free); return err }},
		}
		e.n.reset()
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				err := tt.call()
				require.ErrorIs(t, err, padlock.ErrClosed)
				assert.NotErrorIs(t, err, padlock.ErrNotAcquired)
				trips, cmds := e.n.reset()
				assert.Zero(t, trips, "round trips after Close: %v", cmds)
			})
		}
		assert.False(t, ran, "a function ran under a lock of a closed Client")
		for _, k := range []string{free, free + ":2"} {
			n, err := e.raw.Exists(ctx, k, fenceKey(k), queueKey(k)).Result()
			require.NoError(t, err)
			assert.Zero(t, n, "%s or its side keys were written after Close", k)
		}
		assert.Greater(t, e.pttl(held.Key()), 59*time.Second, "Extend after Close changed the ttl")

		// The calls that only read still read; a lock taken before Close
		// is still released.
		ttl, err := kept.TTL(ctx)
		require.NoError(t, err)
		assert.Positive(t, ttl)
		info, err := e.c.Inspect(ctx, held.Key())
		require.NoError(t, err)
		assert.Equal(t, held.Token(), info.Token)
		leader, err := e.c.Leader(ctx, e.key+":lead")
		require.NoError(t, err)
		assert.Equal(t, "me", leader.Value)
		require.NoError(t, held.Release(ctx))
		require.NoError(t, kept.Release(ctx))
		require.NoError(t, lead.Resign(ctx), "Close ended the leadership; its lock is still released")
		for _, k := range []string{held.Key(), kept.Key(), e.key + ":lead"} {
			assert.Empty(t, e.get(k), "%s is still held", k)
		}
	})
}
