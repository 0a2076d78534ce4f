package padlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/faultproxy"
	"github.com/padlock-go/padlock/internal/redistest"
)

// A waiting Acquire on a Redlock with one silent node returns by its deadline.
func TestAWaiterOnARedlockWithASilentNodeReturnsByItsDeadline(t *testing.T) {
	t.Parallel() // mostly waits
	clients, raws, proxies := proxiedNodes(t, 3, 1)
	c := padlock.NewRedlock(clients)
	t.Cleanup(func() { _ = c.Close() })
	t.Cleanup(func() { // first: what the silent node has in flight ends now
		for _, rdb := range clients {
			_ = rdb.Close()
		}
	})
	ctx := context.Background()
	const key = "lock:bounds:sub"
	for _, r := range raws {
		require.NoError(t, r.Set(ctx, key, "someone", time.Minute).Err())
	}
	// warm up: scripts loaded, connections made
	l, err := c.TryAcquire(ctx, "lock:bounds:warm", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	proxies[0].SetBlackhole(true)
	actx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	start := time.Now()
	_, err = c.Acquire(actx, key, 10*time.Second)
	took := time.Since(start)
	t.Logf("Acquire: %v after %v", err, took)
	if took > 1100*time.Millisecond {
		t.Errorf("Acquire with a 1s deadline returned after %v", took)
	}
	proxies[0].SetBlackhole(false)
}

// A waiting Acquire on a slow Redis (a reply 1s late) returns by its deadline.
func TestAWaiterOnASlowRedisReturnsByItsDeadline(t *testing.T) {
	t.Parallel() // mostly waits
	s := redistest.Start(t)
	px, err := faultproxy.Start(s.Addr())
	require.NoError(t, err)
	t.Cleanup(px.Close)
	rdb := redis.NewClient(&redis.Options{Addr: px.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	c := padlock.New(rdb)
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	const key = "lock:bounds:slowsub"
	require.NoError(t, s.Client().Set(ctx, key, "someone", time.Minute).Err())
	l, err := c.TryAcquire(ctx, "lock:bounds:warm", 10*time.Second, padlock.WithLimit(2)) // wait.lua loaded
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	px.SetLatency(400 * time.Millisecond) // a reply 0.8s after its command
	actx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	start := time.Now()
	_, err = c.Acquire(actx, key, 10*time.Second)
	took := time.Since(start)
	t.Logf("Acquire: %v after %v", err, took)
	if took > 1100*time.Millisecond {
		t.Errorf("Acquire with a 1s deadline returned after %v", took)
	}
	px.SetLatency(0)
}
