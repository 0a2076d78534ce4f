package padlock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
)

func TestInspect(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		info, err := e.c.Inspect(e.ctx, e.key)
		require.NoError(t, err)
		assert.Equal(t, padlock.LockInfo{Key: e.key}, info, "never locked")

		l, err := e.c.TryAcquire(e.ctx, e.key, time.Minute, padlock.WithFencing(), padlock.WithMetadata("host=web-1 pid=42"))
		require.NoError(t, err)
		e.n.reset()
		info, err = e.c.Inspect(e.ctx, e.key)
		require.NoError(t, err)
		trips, _ := e.n.reset()
		assert.Equal(t, 1, trips)
		assert.True(t, info.Held)
		assert.Equal(t, l.Token(), info.Token)
		assert.Equal(t, "host=web-1 pid=42", info.Metadata)
		assert.Equal(t, int64(1), info.Fence)
		if info.TTL <= 50*time.Second || info.TTL > time.Minute {
			t.Errorf("TTL = %v", info.TTL)
		}
		assert.Equal(t, l.Token()+" host=web-1 pid=42", unspanned(e.get(e.key)), "Inspect changed nothing")

		require.NoError(t, l.Release(e.ctx))
		info, err = e.c.Inspect(e.ctx, e.key)
		require.NoError(t, err)
		assert.Equal(t, padlock.LockInfo{Key: e.key, Fence: 1}, info, "released: not held, the counter stays")

		// A value padlock did not write, with no expiry.
		require.NoError(t, e.raw.Set(e.ctx, e.key, "by hand", 0).Err())
		info, err = e.c.Inspect(e.ctx, e.key)
		require.NoError(t, err)
		assert.True(t, info.Held)
		assert.Equal(t, "by", info.Token, "a value is read as a token, a space and metadata")
		assert.Equal(t, "hand", info.Metadata)
		assert.Negative(t, info.TTL)

		_, err = e.c.Inspect(e.ctx, "")
		require.ErrorIs(t, err, padlock.ErrInvalid)
		_, err = e.c.Inspect(e.ctx, "a}b") // cannot be fenced: no counter to read
		require.NoError(t, err)
	})
}
