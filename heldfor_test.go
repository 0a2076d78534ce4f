package padlock_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
)

// heldBetween asserts that Inspect finds key held for at least least and
// at most since took: the hold began after took (by this process's clock;
// the server counts whole milliseconds, and its clock and this process's
// may tick apart by a few).
func heldBetween(t *testing.T, c *padlock.Client, key string, least time.Duration, took time.Time) padlock.LockInfo {
	t.Helper()
	info, err := c.Inspect(t.Context(), key)
	require.NoError(t, err)
	most := time.Since(took) + 5*time.Millisecond
	assert.True(t, info.HeldFor >= least-5*time.Millisecond && info.HeldFor <= most, "%s held for %v: want %v to %v", key, info.HeldFor, least, most)
	return info
}

// How long a lock has been held is read by any process, and stays with
// its holder: an Extend, a renewal, a minimum that outlives a release, a
// leader's Proclaim and a retake by the same token keep it; a new holder
// starts anew.
func TestHeldFor(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	other := moreClients(t, e, 1)[0] // another process's view
	ctx := e.ctx
	pause := func() time.Time { time.Sleep(120 * time.Millisecond); return time.Now() }

	t.Run("Extend", func(t *testing.T) {
		took := time.Now()
		l, err := e.c.TryAcquire(ctx, e.key+":extend", time.Second, padlock.WithMetadata("web-1"))
		require.NoError(t, err)
		pause()
		heldBetween(t, other, l.Key(), 120*time.Millisecond, took)
		require.NoError(t, l.Extend(ctx, 2*time.Second))
		pause()
		info := heldBetween(t, other, l.Key(), 240*time.Millisecond, took)
		assert.Equal(t, "web-1", info.Metadata, "the metadata stays")
		assert.Greater(t, info.TTL, time.Second, "extended")
		require.NoError(t, l.Release(ctx))
	})

	t.Run("KeepAlive", func(t *testing.T) {
		took := time.Now()
		l, err := e.c.TryAcquire(ctx, e.key+":kept", 300*time.Millisecond, padlock.WithFencing())
		require.NoError(t, err)
		kctx, stop := l.KeepAlive(ctx)
		time.Sleep(time.Second) // three ttls, each renewed
		require.NoError(t, kctx.Err())
		heldBetween(t, other, l.Key(), time.Second, took)
		stop()
		require.NoError(t, l.Release(ctx))
	})

	t.Run("NewHolder", func(t *testing.T) {
		key := e.key + ":handed"
		l, err := e.c.TryAcquire(ctx, key, time.Minute)
		require.NoError(t, err)
		got := make(chan *padlock.Lock, 1)
		go func() {
			w, err := other.Acquire(ctx, key, time.Minute)
			assert.NoError(t, err)
			got <- w
		}()
		require.Eventually(t, func() bool {
			info, err := e.c.Inspect(ctx, key)
			return err == nil && info.Waiting == 1
		}, 5*time.Second, 5*time.Millisecond)
		pause()
		handed := time.Now()
		require.NoError(t, l.Release(ctx))
		w := <-got
		require.NotNil(t, w)
		heldBetween(t, e.c, key, 0, handed) // the waiter's hold began at the release
		require.NoError(t, w.Release(ctx))
	})

	t.Run("MinHold", func(t *testing.T) {
		took := time.Now()
		l, err := e.c.TryAcquire(ctx, e.key+":min", 100*time.Millisecond, padlock.WithMinHold(time.Second))
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx)) // kept for its minimum
		pause()
		info := heldBetween(t, other, l.Key(), 120*time.Millisecond, took)
		assert.True(t, info.Held)
		assert.Greater(t, info.MinHold, 500*time.Millisecond)
	})

	t.Run("Retake", func(t *testing.T) {
		took := time.Now()
		key := e.key + ":retake"
		_, err := e.c.TryAcquire(ctx, key, time.Second, padlock.WithToken("job-7"), padlock.WithMetadata("first"))
		require.NoError(t, err)
		pause()
		_, err = other.TryAcquire(ctx, key, time.Second, padlock.WithToken("job-7"), padlock.WithMetadata("again"))
		require.NoError(t, err, "the same token is the same holder")
		info := heldBetween(t, e.c, key, 120*time.Millisecond, took)
		assert.Equal(t, "again", info.Metadata)
	})

	t.Run("Many", func(t *testing.T) {
		took := time.Now()
		keys := []string{e.key + ":{m}:a", e.key + ":{m}:b"}
		l, err := e.c.TryAcquireMany(ctx, keys, 500*time.Millisecond)
		require.NoError(t, err)
		pause()
		require.NoError(t, l.Extend(ctx, time.Second))
		for _, k := range keys {
			heldBetween(t, other, k, 120*time.Millisecond, took)
		}
		require.NoError(t, l.Release(ctx))
	})

	t.Run("Leader", func(t *testing.T) {
		took := time.Now()
		key := e.key + ":leader"
		ld, err := e.c.Campaign(ctx, key, time.Second, "v1")
		require.NoError(t, err)
		pause()
		require.NoError(t, ld.Proclaim(ctx, "v2"))
		info := heldBetween(t, other, key, 120*time.Millisecond, took)
		assert.Equal(t, "leader", info.Kind)
		assert.Equal(t, "v2", info.Metadata)
		require.NoError(t, ld.Resign(ctx))
	})

	t.Run("Semaphore", func(t *testing.T) {
		for _, opt := range []padlock.Option{padlock.WithLimit(3), padlock.WithShared()} {
			key := fmt.Sprintf("%s:counted:%p", e.key, opt)
			took := time.Now()
			first, err := e.c.TryAcquire(ctx, key, 600*time.Millisecond, opt, padlock.WithFencing())
			require.NoError(t, err)
			pause()
			second := time.Now()
			_, err = other.TryAcquire(ctx, key, time.Minute, opt)
			require.NoError(t, err)
			require.NoError(t, first.Extend(ctx, time.Minute))
			pause()
			info := heldBetween(t, other, key, 240*time.Millisecond, took) // the longest holder's
			require.Len(t, info.Holders, 2)
			for _, h := range info.Holders {
				if h.Token == first.Token() {
					assert.True(t, h.HeldFor >= 235*time.Millisecond && h.HeldFor <= time.Since(took)+5*time.Millisecond, "first: %v", h.HeldFor)
				} else {
					assert.True(t, h.HeldFor >= 115*time.Millisecond && h.HeldFor <= time.Since(second)+5*time.Millisecond, "second: %v", h.HeldFor)
				}
			}
			require.NoError(t, first.Release(ctx))
			info = heldBetween(t, other, key, 120*time.Millisecond, second) // the one left
			require.Len(t, info.Holders, 1)
		}
	})

	t.Run("Locks", func(t *testing.T) {
		took := time.Now()
		key := e.key + ":listed"
		_, err := e.c.TryAcquire(ctx, key, time.Second)
		require.NoError(t, err)
		pause()
		n := 0
		for info, err := range other.Locks(ctx, key) {
			require.NoError(t, err)
			n++
			assert.True(t, info.HeldFor >= 115*time.Millisecond && info.HeldFor <= time.Since(took)+5*time.Millisecond, "held for %v", info.HeldFor)
		}
		assert.Equal(t, 1, n)
	})
}

// A value padlock did not write, or another version wrote, has no span:
// held for an unknown time (0), read as before; a renewal gives it one.
func TestHeldForOfAValueWithoutASpan(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	require.NoError(t, e.raw.Set(e.ctx, e.key, "job-9 host=a", time.Minute).Err())
	info, err := e.c.Inspect(e.ctx, e.key)
	require.NoError(t, err)
	assert.Equal(t, padlock.LockInfo{Key: e.key, Held: true, Kind: "lock", Token: "job-9", Metadata: "host=a", TTL: info.TTL}, info)
	l, err := e.c.Resume(e.ctx, e.key, "job-9")
	require.NoError(t, err)
	require.NoError(t, l.Extend(e.ctx, time.Minute))
	assert.Equal(t, "job-9 ~60000 host=a", e.get(e.key), "its span, from the renewal on")
	for _, bad := range []string{"job-9 ~ host", "job-9 ~-5 host", "job-9 ~+5 host", "job-9 ~5x host"} {
		require.NoError(t, e.raw.Set(e.ctx, e.key, bad, time.Minute).Err())
		info, err := e.c.Inspect(e.ctx, e.key)
		require.NoError(t, err)
		assert.Zero(t, info.HeldFor, bad)
		_, rest, _ := strings.Cut(bad, " ")
		assert.Equal(t, rest, info.Metadata, fmt.Sprintf("%q: all after the token is metadata", bad))
	}
}
