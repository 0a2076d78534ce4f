package padlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/redistest"
)

// WithReplicas on a real primary + replica: an acquire or extend that the
// replica acknowledges succeeds; with the replica paused it fails with
// ErrNotReplicated and leaves no lock behind.
func TestWithReplicas(t *testing.T) {
	t.Parallel() // starts servers of its own; mostly waits
	e := newReal(t, nil)
	replica := redistest.StartReplica(t, e.srv)
	rr := replica.Client()
	c := padlock.New(e.rdb, padlock.WithReplicas(1, 300*time.Millisecond))
	defer c.Close()

	l, err := c.TryAcquire(e.ctx, e.key, time.Minute, padlock.WithFencing())
	require.NoError(t, err)
	assert.Equal(t, l.Token(), unspanned(rr.Get(e.ctx, e.key).Val()), "on the replica when TryAcquire returned")
	require.NoError(t, l.Extend(e.ctx, time.Minute))
	kctx, stop := l.KeepAlive(e.ctx)
	require.NoError(t, l.Release(e.ctx))
	stop()
	require.ErrorIs(t, context.Cause(kctx), context.Canceled)

	w, err := c.Acquire(e.ctx, e.key, time.Minute)
	require.NoError(t, err, "Acquire waits for the replica too")
	require.NoError(t, w.Release(e.ctx))

	held, err := c.TryAcquire(e.ctx, e.key+":held", time.Minute)
	require.NoError(t, err)
	replica.Pause()
	_, err = c.TryAcquire(e.ctx, e.key, time.Minute)
	require.ErrorIs(t, err, padlock.ErrNotReplicated)
	assert.NotErrorIs(t, err, padlock.ErrNotAcquired)
	assert.Contains(t, err.Error(), "0 of 1 replicas acknowledged")
	assert.Empty(t, e.get(e.key), "the unreplicated lock was released")
	_, err = c.Acquire(e.ctx, e.key, time.Minute)
	require.ErrorIs(t, err, padlock.ErrNotReplicated)
	assert.Empty(t, e.get(e.key))

	err = held.Extend(e.ctx, time.Minute)
	require.ErrorIs(t, err, padlock.ErrNotReplicated)
	assert.Empty(t, e.get(e.key+":held"), "the unreplicated extend released the lock")
	replica.Resume()
}

func TestWithReplicasBadInput(t *testing.T) {
	t.Parallel()
	e := newMini(t)
	_, err := e.c.TryAcquire(e.ctx, e.key, time.Minute, padlock.WithReplicas(1, 0))
	require.ErrorIs(t, err, padlock.ErrInvalid)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": e.mr.Addr()}})
	defer ring.Close()
	_, err = padlock.New(ring, padlock.WithReplicas(1, time.Second)).TryAcquire(e.ctx, e.key, time.Minute)
	require.ErrorIs(t, err, padlock.ErrUnsupported, "a Ring is refused")
	assert.False(t, e.mr.Exists(e.key))
}

// A lease that waits for a replica (WithReplicas) renews beside the
// Client's other leases: with the replica stopped, a plain 600ms lease of
// the same Client is not held up, and not lost.
func TestAReplicaWaitDoesNotHoldUpOtherLeases(t *testing.T) {
	longOnly(t)
	t.Parallel()
	e := newReal(t, nil)
	replica := redistest.StartReplica(t, e.srv)
	slow, err := e.c.TryAcquire(e.ctx, e.key+":replicated", time.Minute, padlock.WithReplicas(1, 1500*time.Millisecond))
	require.NoError(t, err)
	plain, err := e.c.TryAcquire(e.ctx, e.key, 600*time.Millisecond)
	require.NoError(t, err)
	sctx, sstop := slow.KeepAlive(e.ctx)
	defer sstop()
	pctx, pstop := plain.KeepAlive(e.ctx)
	defer pstop()
	replica.Pause()
	defer replica.Resume()
	time.Sleep(5 * time.Second)
	require.NoError(t, pctx.Err(), "the plain lease: %v", context.Cause(pctx))
	t.Logf("the replicated lease: %v", context.Cause(sctx))
	require.NoError(t, plain.Release(e.ctx))
}
