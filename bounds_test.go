package padlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/faultproxy"
)

// Every call of the API that talks to Redis returns by its context's
// deadline, within a small bound, when Redis takes its commands and never
// answers: on go-redis with default options (whose ReadTimeout, 3s, is no
// bound of padlock's), for each kind of lock, a Redlock and WithReplicas.
// (driver/drivertest checks the lock calls on every driver, and a server
// that answers late.)
func TestEveryCallReturnsByItsDeadline(t *testing.T) {
	t.Parallel() // mostly waits
	e := newReal(t, nil)
	px, err := faultproxy.Start(e.srv.Addr())
	require.NoError(t, err)
	t.Cleanup(px.Close)
	rdb := redis.NewClient(&redis.Options{Addr: px.Addr()})
	c := padlock.New(rdb)
	t.Cleanup(func() { _ = c.Close() })
	redlock := padlock.NewRedlock([]redis.UniversalClient{rdb})
	t.Cleanup(func() { _ = redlock.Close() })
	// First of the cleanups: what the calls left in flight ends at once,
	// and the Clients' Close need not wait for a Redlock node's turn.
	t.Cleanup(func() { _ = rdb.Close() })
	held, err := c.TryAcquire(e.ctx, e.key+":held", time.Minute)
	require.NoError(t, err)
	leading, err := c.Campaign(e.ctx, e.key+":leader", time.Minute, "me")
	require.NoError(t, err)
	px.SetBlackhole(true)

	const timeout, bound = 500 * time.Millisecond, 100 * time.Millisecond
	fn := func(context.Context) error { return nil }
	k := e.key
	tests := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"TryAcquire", func(ctx context.Context) error { _, err := c.TryAcquire(ctx, k, time.Minute); return err }},
		{"Acquire", func(ctx context.Context) error { _, err := c.Acquire(ctx, k, time.Minute); return err }},
		{"Acquire, semaphore", func(ctx context.Context) error {
			_, err := c.Acquire(ctx, k+":sem", time.Minute, padlock.WithLimit(3))
			return err
		}},
		{"Acquire, shared", func(ctx context.Context) error {
			_, err := c.Acquire(ctx, k+":shared", time.Minute, padlock.WithShared())
			return err
		}},
		{"Acquire, WithReplicas", func(ctx context.Context) error {
			_, err := c.Acquire(ctx, k+":replicas", time.Minute, padlock.WithReplicas(1, time.Second))
			return err
		}},
		{"Acquire, Redlock", func(ctx context.Context) error { _, err := redlock.Acquire(ctx, k, time.Minute); return err }},
		{"TryDo", func(ctx context.Context) error { return c.TryDo(ctx, k, time.Minute, fn) }},
		{"Do", func(ctx context.Context) error { return c.Do(ctx, k, time.Minute, fn) }},
		{"AcquireMany", func(ctx context.Context) error {
			_, err := c.AcquireMany(ctx, []string{k + ":{m}a", k + ":{m}b"}, time.Minute)
			return err
		}},
		{"Extend", func(ctx context.Context) error { return held.Extend(ctx, time.Minute) }},
		{"TTL", func(ctx context.Context) error { _, err := held.TTL(ctx); return err }},
		{"Inspect", func(ctx context.Context) error { _, err := c.Inspect(ctx, k); return err }},
		{"Break", func(ctx context.Context) error { _, err := c.Break(ctx, k+":broken"); return err }},
		{"Resume", func(ctx context.Context) error { _, err := c.Resume(ctx, k+":held", held.Token()); return err }},
		{"Check", func(ctx context.Context) error { _, err := c.Check(ctx, k); return err }},
		{"Campaign", func(ctx context.Context) error {
			_, err := c.Campaign(ctx, k+":campaign", time.Minute, "v")
			return err
		}},
		{"Lead", func(ctx context.Context) error { return c.Lead(ctx, k+":lead", time.Minute, "v", fn) }},
		{"Leader", func(ctx context.Context) error { _, err := c.Leader(ctx, k+":leader"); return err }},
		{"Proclaim", func(ctx context.Context) error { return leading.Proclaim(ctx, "you") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(e.ctx, timeout)
			defer cancel()
			start := time.Now()
			err := tt.call(ctx)
			took := time.Since(start)
			require.Error(t, err, "Redis never answered")
			require.LessOrEqual(t, took, timeout+bound, "returned after %v: %v", took, err)
		})
	}
}
