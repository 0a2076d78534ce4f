package padlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/driver"
	"github.com/padlock-go/padlock/internal/fipsoff"
)

// outside is a Driver that padlock knows only by the interface, as it
// knows a third party's: the go-redis adapter inside it, its calls
// counted, and its Kind what kind says (the inner one's if 0).
type outside struct {
	driver.Driver
	kind                     driver.Kind
	kinds, dos, batches, pss atomic.Int32
}

func (o *outside) Kind() driver.Kind {
	o.kinds.Add(1)
	if o.kind != 0 {
		return o.kind
	}
	return o.Driver.Kind()
}

func (o *outside) Do(ctx context.Context, key string, args ...any) (any, error) {
	o.dos.Add(1)
	return o.Driver.Do(ctx, key, args...)
}

func (o *outside) Batch(ctx context.Context, cmds []driver.Cmd) {
	o.batches.Add(1)
	o.Driver.Batch(ctx, cmds)
}

func (o *outside) PubSub(ctx context.Context, key string) (driver.PubSub, error) {
	o.pss.Add(1)
	return o.Driver.PubSub(ctx, key)
}

// A Client of NewDriver takes, hands off, fences and keeps alive a lock
// through the Driver alone, and asks its Kind once.
func TestNewDriverRunsOnAnyDriver(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		d := &outside{Driver: padlock.GoRedisDriver(e.rdb)}
		holder, waiter := padlock.NewDriver(d, padlock.WithFencing()), padlock.NewDriver(d, padlock.WithFencing())
		defer holder.Close()
		defer waiter.Close()
		first, err := holder.TryAcquire(e.ctx, e.key, time.Second)
		require.NoError(t, err)
		got := make(chan *padlock.Lock, 1)
		go func() {
			l, err := waiter.Acquire(e.ctx, e.key, 300*time.Millisecond)
			assert.NoError(t, err)
			got <- l
		}()
		require.Eventually(t, func() bool { return d.pss.Load() > 0 }, 5*time.Second, time.Millisecond, "the waiter subscribes")
		require.NoError(t, first.Release(e.ctx))
		second := <-got
		require.NotNil(t, second)
		assert.Greater(t, second.Fence(), first.Fence())
		ctx, stop := second.KeepAlive(e.ctx)
		require.Eventually(t, func() bool { return d.batches.Load() > 0 }, 5*time.Second, time.Millisecond, "renewals go in a Batch")
		stop()
		assert.Error(t, ctx.Err(), "stop ends the KeepAlive")
		require.NoError(t, second.Release(e.ctx))
		assert.Equal(t, int32(2), d.kinds.Load(), "Kind is asked once per Client")
		assert.Positive(t, d.dos.Load())
	})
}

// A Redlock of NewDriverRedlock takes its quorum through the Drivers.
func TestNewDriverRedlock(t *testing.T) {
	t.Parallel()
	var ds []driver.Driver
	var outs []*outside
	for range 3 {
		var mr *miniredis.Miniredis
		fipsoff.Run(func() { mr = miniredis.RunT(t) })
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		o := &outside{Driver: padlock.GoRedisDriver(rdb)}
		ds, outs = append(ds, o), append(outs, o)
	}
	c := padlock.NewDriverRedlock(ds)
	defer c.Close()
	l, err := c.TryAcquire(t.Context(), "lock:"+t.Name(), time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(t.Context()))
	for i, o := range outs {
		assert.Equal(t, int32(1), o.kinds.Load(), "node %d: Kind once", i)
		assert.Positive(t, o.dos.Load(), "node %d", i)
	}
	_, err = c.TryAcquire(t.Context(), "lock:"+t.Name(), time.Second, padlock.WithFencing())
	require.ErrorIs(t, err, padlock.ErrInvalid, "a Redlock refuses fencing, on any driver")
}

// Nothing to talk to, or a Kind package driver does not define, is
// ErrInvalid on every call, not a panic.
func TestNewDriverRefuses(t *testing.T) {
	t.Parallel()
	e := newMini(t)
	var typedNil *outside
	tests := []struct {
		name string
		c    *padlock.Client
	}{
		{"nil", padlock.NewDriver(nil)},
		{"typed nil", padlock.NewDriver(typedNil)},
		{"unknown kind", padlock.NewDriver(&outside{Driver: padlock.GoRedisDriver(e.rdb), kind: 7})},
		{"no nodes", padlock.NewDriverRedlock(nil)},
		{"a nil node", padlock.NewDriverRedlock([]driver.Driver{padlock.GoRedisDriver(e.rdb), nil})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer tt.c.Close()
			_, err := tt.c.TryAcquire(e.ctx, e.key, time.Second)
			require.ErrorIs(t, err, padlock.ErrInvalid)
			_, err = tt.c.Inspect(e.ctx, e.key)
			require.ErrorIs(t, err, padlock.ErrInvalid)
		})
	}
	assert.Empty(t, e.get(e.key))
}

// The go-redis adapter classifies errors as package driver says, and
// still wraps go-redis's own.
func TestGoRedisDriverErrors(t *testing.T) {
	t.Parallel()
	e := newMini(t)
	d := padlock.GoRedisDriver(e.rdb)
	v, err := d.Do(e.ctx, e.key, "get", e.key)
	assert.Nil(t, v)
	assert.ErrorIs(t, err, driver.ErrNil)

	_, err = d.Do(e.ctx, "", "nosuchcommand")
	reply, ok := driver.Error(err)
	require.True(t, ok, "an error reply: %v", err)
	assert.Contains(t, string(reply), "nosuchcommand")
	var rerr redis.Error
	assert.True(t, errors.As(err, &rerr), "go-redis's error is wrapped")

	cmds := []driver.Cmd{
		{Key: e.key, Args: []any{"set", e.key, "v"}},
		{Key: e.key, Args: []any{"mget", e.key, e.key + "x"}},
		{Key: e.key, Args: []any{"incr", e.key}},
	}
	d.Batch(e.ctx, cmds)
	assert.Equal(t, "OK", cmds[0].Reply)
	assert.Equal(t, []any{"v", nil}, cmds[1].Reply)
	_, ok = driver.Error(cmds[2].Err)
	assert.True(t, ok, "INCR of a string: an error reply: %v", cmds[2].Err)

	closed := redis.NewClient(&redis.Options{Addr: e.mr.Addr()})
	require.NoError(t, closed.Close())
	_, err = padlock.GoRedisDriver(closed).Do(e.ctx, e.key, "get", e.key)
	assert.ErrorIs(t, err, driver.ErrClosed)
	assert.ErrorIs(t, err, redis.ErrClosed)
}
