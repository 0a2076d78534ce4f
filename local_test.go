package padlock_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
)

// localOf returns the entry of c.Local for key, and whether there is one;
// it fails the test if there are two.
func localOf(t *testing.T, c *padlock.Client, key string) (padlock.LocalLock, bool) {
	t.Helper()
	var found []padlock.LocalLock
	for _, h := range c.Local() {
		if h.Key == key {
			found = append(found, h)
		}
	}
	require.LessOrEqual(t, len(found), 1, "%q listed twice: %+v", key, found)
	if len(found) == 0 {
		return padlock.LocalLock{}, false
	}
	return found[0], true
}

// Local lists every kind of hold this Client has, as it is, and forgets
// each once it is released.
func TestLocalListsWhatThisClientHolds(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		assert.Empty(t, e.c.Local())
		before := time.Now()
		lock, err := e.c.TryAcquire(e.ctx, e.key, time.Minute, padlock.WithFencing(), padlock.WithMetadata("deploy 42"))
		require.NoError(t, err)
		place, err := e.c.TryAcquire(e.ctx, e.key+":sem", time.Minute, padlock.WithLimit(3))
		require.NoError(t, err)
		shared, err := e.c.TryAcquire(e.ctx, e.key+":rw", time.Minute, padlock.WithShared())
		require.NoError(t, err)
		many, err := e.c.TryAcquireMany(e.ctx, []string{e.key + ":{m}a", e.key + ":{m}b"}, time.Minute)
		require.NoError(t, err)
		lead, err := e.c.Campaign(e.ctx, e.key+":leader", time.Minute, "node-1")
		require.NoError(t, err)

		h, ok := localOf(t, e.c, e.key)
		require.True(t, ok)
		assert.Equal(t, padlock.LocalLock{Key: e.key, Kind: "lock", Token: lock.Token(), Metadata: "deploy 42",
			Fence: lock.Fence(), Since: h.Since, Deadline: lock.Deadline()}, h)
		assert.Positive(t, h.Fence)
		assert.False(t, h.Since.Before(before))
		assert.False(t, h.Since.After(time.Now()))
		assert.Equal(t, lock.Deadline().Add(-time.Minute+time.Minute/100+2*time.Millisecond), h.Since,
			"Since is the acquire's send, from which Deadline counts")

		kinds := map[string]string{e.key + ":sem": "semaphore", e.key + ":rw": "shared", e.key + ":{m}a": "lock", e.key + ":leader": "leader"}
		for key, kind := range kinds {
			h, ok := localOf(t, e.c, key)
			require.True(t, ok, key)
			assert.Equal(t, kind, h.Kind, key)
			assert.False(t, h.Waiting, key)
		}
		h, _ = localOf(t, e.c, e.key+":{m}a")
		assert.Equal(t, []string{e.key + ":{m}a", e.key + ":{m}b"}, h.Keys)
		h, _ = localOf(t, e.c, e.key+":leader")
		assert.Equal(t, "node-1", h.Metadata)
		assert.Equal(t, lead.Term(), h.Fence)
		require.NoError(t, lead.Proclaim(e.ctx, "node-1 (draining)"))
		h, _ = localOf(t, e.c, e.key+":leader")
		assert.Equal(t, "node-1 (draining)", h.Metadata, "the value proclaimed last")
		h, _ = localOf(t, e.c, e.key+":sem")
		assert.Equal(t, place.Token(), h.Token)

		all := e.c.Local()
		require.Len(t, all, 5)
		for i := 1; i < len(all); i++ {
			assert.False(t, all[i].Since.Before(all[i-1].Since), "longest held first")
		}
		assert.Equal(t, e.key, all[0].Key)

		require.NoError(t, lock.Release(e.ctx))
		require.NoError(t, place.Release(e.ctx))
		require.NoError(t, shared.Release(e.ctx))
		require.NoError(t, many.Release(e.ctx))
		require.NoError(t, lead.Resign(e.ctx))
		assert.Empty(t, e.c.Local())
		assert.Zero(t, padlock.HoldsListed(e.c))
	})
}

// A waiting Acquire is listed as waiting, with its token, until it gets
// the lock: then as a hold.
func TestLocalListsWaits(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		other, holder := e.heldElsewhere(t)

		waiting := make(chan struct{})
		got := make(chan *padlock.Lock, 1)
		before := time.Now()
		go func() {
			defer close(got)
			l, err := e.c.Acquire(e.ctx, e.key, time.Minute, padlock.WithMetadata("next"),
				padlock.WithObserver(&padlock.Observer{WaitStart: func(context.Context, string) { close(waiting) }}))
			if err == nil {
				got <- l
			}
		}()
		select {
		case <-waiting:
		case <-time.After(10 * time.Second):
			t.Fatal("the Acquire did not start to wait")
		}
		h, ok := localOf(t, e.c, e.key)
		require.True(t, ok)
		assert.True(t, h.Waiting)
		assert.Equal(t, "lock", h.Kind)
		assert.Equal(t, "next", h.Metadata)
		assert.NotEmpty(t, h.Token)
		assert.False(t, h.Since.Before(before))
		assert.True(t, h.Deadline.IsZero())
		h, ok = localOf(t, other, e.key)
		require.True(t, ok, "each Client lists its own")
		assert.False(t, h.Waiting)
		assert.Equal(t, holder.Token(), h.Token)

		require.NoError(t, holder.Release(e.ctx))
		var l *padlock.Lock
		select {
		case l = <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter did not get the lock")
		}
		require.NotNil(t, l)
		h, ok = localOf(t, e.c, e.key)
		require.True(t, ok)
		assert.False(t, h.Waiting)
		assert.Equal(t, l.Token(), h.Token)
		assert.Empty(t, other.Local())
		require.NoError(t, l.Release(e.ctx))
		assert.Empty(t, e.c.Local())
	})
}

// A hold that is lost, or left to expire, is not listed; one left to
// expire is dropped from the Client's books by later acquires, so that a
// program that never releases does not grow them, even beside a lock it
// holds for long.
func TestLocalForgetsLostAndExpiredHolds(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		l, err := e.c.TryAcquire(e.ctx, e.key, time.Minute)
		require.NoError(t, err)
		_, err = e.c.Break(e.ctx, e.key)
		require.NoError(t, err)
		require.ErrorIs(t, l.Extend(e.ctx, time.Minute), padlock.ErrNotHeld)
		assert.Empty(t, e.c.Local())
		assert.Zero(t, padlock.HoldsListed(e.c))

		// Left to expire: gone from Local at its local deadline.
		var last *padlock.Lock
		for i := range 50 {
			last, err = e.c.TryAcquire(e.ctx, e.key+":"+strconv.Itoa(i), time.Second)
			require.NoError(t, err)
		}
		kept, err := e.c.TryAcquire(e.ctx, e.key+":kept", time.Minute)
		require.NoError(t, err)
		time.Sleep(time.Until(last.Deadline()) + time.Millisecond)
		all := e.c.Local()
		require.Len(t, all, 1)
		assert.Equal(t, kept.Token(), all[0].Token)
		// Each acquire drops the oldest expired hold (or moves a live one
		// on): 60 acquires leave none of the 50.
		for i := range 60 {
			l, err := e.c.TryAcquire(e.ctx, e.key+":again", time.Minute)
			require.NoError(t, err, i)
			require.NoError(t, l.Release(e.ctx))
		}
		assert.Equal(t, 1, padlock.HoldsListed(e.c))

		// A program that holds a lock for long and takes others that it
		// leaves to expire, one at a time: the books keep a few.
		taken := 0
		for i := 0; taken < 60 && i < 1000; i++ {
			l, err := e.c.TryAcquire(e.ctx, e.key+":expire:"+strconv.Itoa(i), 30*time.Millisecond)
			if errors.Is(err, padlock.ErrNotAcquired) {
				continue // its reply came too late, on a loaded machine: released
			}
			require.NoError(t, err, i)
			taken++
			time.Sleep(time.Until(l.Deadline()) + time.Millisecond)
		}
		require.Equal(t, 60, taken, "in 1,000 tries")
		assert.LessOrEqual(t, padlock.HoldsListed(e.c), 4, "the held lock and the latest expired ones, of %d", taken)
		require.NoError(t, kept.Release(e.ctx))
		assert.Empty(t, e.c.Local())
	})
}

// A hold whose local deadline passed (a reply that came late) is dropped
// from the books by a later acquire; an Extend that then finds it still
// ours in Redis lists it again.
func TestLocalListsAHoldExtendedPastItsDeadline(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		l, err := e.c.TryAcquire(e.ctx, e.key, 100*time.Millisecond)
		require.NoError(t, err)
		require.NoError(t, e.raw.PExpire(e.ctx, e.key, time.Minute).Err()) // Redis keeps it longer than padlock knows
		time.Sleep(time.Until(l.Deadline()) + time.Millisecond)
		for i := range 2 {
			other, err := e.c.TryAcquire(e.ctx, e.key+":other:"+strconv.Itoa(i), time.Minute)
			require.NoError(t, err)
			require.NoError(t, other.Release(e.ctx))
		}
		assert.Empty(t, e.c.Local())
		assert.Zero(t, padlock.HoldsListed(e.c), "dropped by the acquires")

		require.NoError(t, l.Extend(e.ctx, time.Minute))
		h, ok := localOf(t, e.c, e.key)
		require.True(t, ok, "listed again")
		assert.Equal(t, l.Token(), h.Token)
		require.NoError(t, l.Release(e.ctx))
		assert.Empty(t, e.c.Local())
	})
}
