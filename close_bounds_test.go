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

// Close on a Redlock whose one node went silent returns within about 2s.
func TestCloseOfARedlockBehindASilentNodeIsBounded(t *testing.T) {
	longOnly(t) // Close takes its 2s
	clients, _, proxies := proxiedNodes(t, 3, 1)
	c := padlock.NewRedlock(clients)
	ctx := context.Background()
	// warm up
	l, err := c.TryAcquire(ctx, "lock:bounds:warm", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	proxies[0].SetBlackhole(true)
	start := time.Now()
	l, err = c.TryAcquire(ctx, "lock:bounds:close", 10*time.Second)
	require.NoError(t, err, "a quorum answers")
	t.Logf("TryAcquire took %v", time.Since(start))
	start = time.Now()
	require.NoError(t, l.Release(ctx))
	t.Logf("Release took %v", time.Since(start))
	start = time.Now()
	_ = c.Close()
	took := time.Since(start)
	t.Logf("Close took %v", took)
	if took > 2500*time.Millisecond {
		t.Errorf("Close took %v; its doc says about 2s whatever Redis does", took)
	}
	proxies[0].SetBlackhole(false)
}

// Close returns within about 2s while an Observe redials a silent server.
func TestCloseWhileObserveDialsAgainIsBounded(t *testing.T) {
	longOnly(t) // Close takes its 2s
	s := redistest.Start(t)
	px, err := faultproxy.Start(s.Addr())
	require.NoError(t, err)
	t.Cleanup(px.Close)
	rdb := redis.NewClient(&redis.Options{Addr: px.Addr(), ReadTimeout: 6 * time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	c := padlock.New(rdb)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := c.Observe(ctx, "lead:bounds")
	<-out // the first state
	time.Sleep(100 * time.Millisecond)
	px.SetBlackhole(true)
	px.CutAll() // the observer's connection drops; it redials a server that does not answer
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	_ = c.Close()
	took := time.Since(start)
	t.Logf("Close took %v", took)
	if took > 2500*time.Millisecond {
		t.Errorf("Close took %v", took)
	}
}

// A TryAcquire that failed by its deadline leaves nothing held, also when
// the program then shuts down as README says: locks.Close(), rdb.Close().
func TestAFailedAcquireIsUndoneBeforeCloseReturns(t *testing.T) {
	t.Parallel() // mostly waits
	s := redistest.Start(t)
	px, err := faultproxy.Start(s.Addr())
	require.NoError(t, err)
	t.Cleanup(px.Close)
	rdb := redis.NewClient(&redis.Options{Addr: px.Addr()})
	c := padlock.New(rdb)
	ctx := context.Background()
	l, err := c.TryAcquire(ctx, "lock:bounds:warm", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	px.SetLatency(100 * time.Millisecond)
	actx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = c.TryAcquire(actx, "lock:bounds:shutdown", 10*time.Second)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	// The caller is done; the program shuts down in README's order.
	require.NoError(t, c.Close())
	require.NoError(t, rdb.Close())
	time.Sleep(500 * time.Millisecond) // the proxy delivers what it holds
	pttl := s.Client().PTTL(ctx, "lock:bounds:shutdown").Val()
	if pttl > 0 {
		t.Errorf("a failed TryAcquire left the key held by nobody for %v", pttl)
	}
}
