package padlock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
)

// One blackholed node of five holds up no Redlock call: a 2s lock is
// taken, and released, while four nodes answer (before, every call waited
// for the blackholed node: go-redis's ReadTimeout, 3s).
func TestRedlockCallsDoNotWaitForABlackholedNode(t *testing.T) {
	longOnly(t)
	t.Parallel()
	clients, _, proxies := proxiedNodes(t, 5, 1)
	bh := proxies[0]
	c := padlock.NewRedlock(clients)
	ctx := t.Context()
	require.NoError(t, clients[0].Ping(ctx).Err())
	bh.SetBlackhole(true)
	start := time.Now()
	l, err := c.TryAcquire(ctx, "lock:bh", 2*time.Second)
	t.Logf("TryAcquire(2s) with 1 of 5 nodes blackholed: %v after %v", err, time.Since(start).Round(time.Millisecond))
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	start = time.Now()
	l, err = c.TryAcquire(ctx, "lock:bh2", 10*time.Second)
	took := time.Since(start)
	require.NoError(t, err)
	start = time.Now()
	require.NoError(t, l.Release(ctx))
	t.Logf("TryAcquire(10s) took %v, Release %v", took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	assert.Less(t, took+time.Since(start), 2*time.Second, "not the blackholed node's 3s each")
	bh.SetBlackhole(false)
	require.NoError(t, c.Close())
}
