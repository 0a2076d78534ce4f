package padlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/padlock-go/padlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
		// The undo follows the attempt, which the waiter left in flight:
		// in the background, once the attempt's reply is in.
		assert.Eventually(t, func() bool { return e.get(key) == "" }, 2*time.Second, time.Millisecond,
			"the lock taken as the wait ended is not left held")
	})
}
