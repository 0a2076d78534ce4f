package padlock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
)

// A late answer of a slow node to the last extend does not set a Redlock
// lock again there after Release returned: a released lock stays
// released.
func TestRedlockReleaseIsNotUndoneByASlowNode(t *testing.T) {
	t.Parallel()
	clients, raws, proxies := proxiedNodes(t, 5, 1)
	slow := proxies[0]
	c := padlock.NewRedlock(clients)
	defer c.Close()
	ctx := t.Context()
	const key, ttl = "lock:zombie", 3 * time.Second
	l, err := c.TryAcquire(ctx, key, ttl)
	require.NoError(t, err)
	require.NoError(t, raws[0].FlushAll(ctx).Err()) // node 0 restarted empty
	slow.SetLatency(40 * time.Millisecond)
	// Warm node 0's pool, so that the Release does not dial.
	done := make(chan struct{})
	for range 4 {
		go func() { _ = clients[0].Ping(ctx).Err(); done <- struct{}{} }()
	}
	for range 4 {
		<-done
	}
	require.NoError(t, l.Extend(ctx, ttl)) // done at the quorum of nodes 1-4
	require.NoError(t, l.Release(ctx))
	for i, r := range raws {
		t.Logf("after Release: node %d: %q", i, r.Get(ctx, key).Val())
	}
	time.Sleep(300 * time.Millisecond)
	v := raws[0].Get(ctx, key).Val()
	pttl := raws[0].PTTL(ctx, key).Val()
	info, _ := c.Inspect(ctx, key)
	t.Logf("300ms after Release: node 0 holds %q (pttl %v); Inspect: held=%v token=%q", v, pttl, info.Held, info.Token)
	require.Empty(t, v, "released lock re-created on node 0 by a late reestablish")
}
