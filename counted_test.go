package padlock_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
)

func TestSemaphoreAdmitsN(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		three := padlock.WithLimit(3)
		var held []*padlock.Lock
		for i := range 3 {
			l, err := e.c.TryAcquire(e.ctx, e.key, 10*time.Second, three, padlock.WithMetadata(fmt.Sprint("job ", i)))
			require.NoError(t, err, "holder %d", i)
			held = append(held, l)
		}
		_, err := e.c.TryAcquire(e.ctx, e.key, 10*time.Second, three)
		require.ErrorIs(t, err, padlock.ErrNotAcquired, "the fourth")

		info, err := e.c.Inspect(e.ctx, e.key)
		require.NoError(t, err)
		assert.True(t, info.Held)
		assert.Equal(t, "semaphore", info.Kind)
		require.Len(t, info.Holders, 3)
		var tokens []string
		for _, h := range info.Holders {
			tokens = append(tokens, h.Token)
			assert.Greater(t, h.TTL, 5*time.Second)
		}
		for i, l := range held {
			assert.Contains(t, tokens, l.Token())
			assert.Equal(t, fmt.Sprint("job ", i), l.Metadata())
		}

		require.NoError(t, held[1].Release(e.ctx))
		require.ErrorIs(t, held[1].Release(e.ctx), padlock.ErrNotHeld, "Release twice")
		again, err := e.c.TryAcquire(e.ctx, e.key, 10*time.Second, three)
		require.NoError(t, err, "a released place is taken again")
		_, err = e.c.TryAcquire(e.ctx, e.key, 10*time.Second, three)
		require.ErrorIs(t, err, padlock.ErrNotAcquired)

		require.NoError(t, held[0].Extend(e.ctx, 20*time.Second))
		d, err := held[0].TTL(e.ctx)
		require.NoError(t, err)
		assert.Greater(t, d, 15*time.Second)
		d, err = held[2].TTL(e.ctx)
		require.NoError(t, err)
		assert.LessOrEqual(t, d, 10*time.Second, "each holder has its own ttl")

		for _, l := range []*padlock.Lock{held[0], held[2], again} {
			require.NoError(t, l.Release(e.ctx))
		}
		info, err = e.c.Inspect(e.ctx, e.key)
		require.NoError(t, err)
		assert.False(t, info.Held)
		assert.Zero(t, e.raw.Exists(e.ctx, e.key).Val(), "nothing left")
	})
}

func TestSemaphoreBadInput(t *testing.T) {
	t.Parallel()
	e := newMini(t)
	tests := []struct {
		name string
		call func() error
	}{
		{"limit 0", func() error { _, err := e.c.TryAcquire(e.ctx, e.key, time.Second, padlock.WithLimit(0)); return err }},
		{"negative limit", func() error { _, err := e.c.Acquire(e.ctx, e.key, time.Second, padlock.WithLimit(-2)); return err }},
		{"limit and shared", func() error {
			_, err := e.c.TryAcquire(e.ctx, e.key, time.Second, padlock.WithLimit(2), padlock.WithShared())
			return err
		}},
		{"multi-key semaphore", func() error {
			_, err := e.c.TryAcquireMany(e.ctx, []string{"{a}1", "{a}2"}, time.Second, padlock.WithLimit(2))
			return err
		}},
		{"multi-key shared", func() error {
			_, err := e.c.TryAcquireMany(e.ctx, []string{"{a}1", "{a}2"}, time.Second, padlock.WithShared())
			return err
		}},
		{"redlock", func() error {
			_, err := padlock.NewRedlock([]redis.UniversalClient{e.rdb}).TryAcquire(e.ctx, e.key, time.Second, padlock.WithLimit(2))
			return err
		}},
		{"brace without tag", func() error { _, err := e.c.TryAcquire(e.ctx, "a{b", time.Second, padlock.WithShared()); return err }},
	}
	for _, tt := range tests {
		err := tt.call()
		require.ErrorIs(t, err, padlock.ErrInvalid, tt.name)
		t.Logf("%s: %v", tt.name, err)
	}
	assert.Empty(t, e.mr.Keys(), "nothing written")
}

// A holder that dies (never releases) frees its place when its ttl runs
// out; fences increase with every holder.
func TestSemaphoreDeadHolderAndFences(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	two := padlock.WithLimit(2)
	var last int64
	// Redis took the dead holder's place after this: its ttl runs out after
	// deadline.
	deadline := time.Now().Add(300 * time.Millisecond)
	dead, err := e.c.TryAcquire(e.ctx, e.key, 300*time.Millisecond, two, padlock.WithFencing())
	require.NoError(t, err)
	alive, err := e.c.TryAcquire(e.ctx, e.key, 10*time.Second, two, padlock.WithFencing())
	require.NoError(t, err)
	assert.Greater(t, alive.Fence(), dead.Fence())
	last = alive.Fence()
	_, err = e.c.TryAcquire(e.ctx, e.key, time.Second, two)
	require.ErrorIs(t, err, padlock.ErrNotAcquired)
	var next *padlock.Lock
	require.Eventually(t, func() bool {
		next, err = e.c.TryAcquire(e.ctx, e.key, time.Second, two, padlock.WithFencing())
		return err == nil
	}, 2*time.Second, 10*time.Millisecond, "the dead holder's place frees")
	assert.False(t, time.Now().Before(deadline), "not before its ttl ran out")
	assert.Less(t, time.Since(deadline), 500*time.Millisecond, "soon after its ttl ran out")
	assert.Greater(t, next.Fence(), last)
	info, err := e.c.Inspect(e.ctx, e.key)
	require.NoError(t, err)
	assert.Len(t, info.Holders, 2)
	assert.Equal(t, next.Fence(), info.Fence)
	fences := []int64{info.Holders[0].Fence, info.Holders[1].Fence}
	slices.Sort(fences)
	assert.Equal(t, []int64{alive.Fence(), next.Fence()}, fences, "each holder's fence")
	require.ErrorIs(t, dead.Release(e.ctx), padlock.ErrNotHeld)
}

// An Acquire waiting for a place is woken by a release, long before any
// ttl runs out (and well before its own poll would wake it).
func TestSemaphoreWaiterWokenByRelease(t *testing.T) {
	t.Parallel() // mostly waits, on servers of its own
	e := newReal(t, nil)
	other := padlock.New(e.raw)
	defer other.Close()
	one := padlock.WithLimit(1)
	for round := range 3 {
		held, err := other.TryAcquire(e.ctx, e.key, 30*time.Second, one)
		require.NoError(t, err)
		got := make(chan time.Time, 1)
		done := make(chan struct{})
		go func() {
			defer close(done)
			l, err := e.c.Acquire(e.ctx, e.key, 30*time.Second, one, slow)
			if assert.NoError(t, err) {
				got <- time.Now()
				assert.NoError(t, l.Release(e.ctx))
			}
		}()

		time.Sleep(time.Duration(200+round*150) * time.Millisecond)
		released := time.Now()
		require.NoError(t, held.Release(e.ctx))
		select {
		case at := <-got:
			assert.Less(t, at.Sub(released), 250*time.Millisecond, "round %d: woken by the release", round)
		case <-time.After(5 * time.Second):
			t.Fatal("the waiter did not get the place")
		}
		<-done // it has released its place
	}
}

// Waiters in different clients are admitted in order of arrival.
func TestSemaphoreIsFairAcrossClients(t *testing.T) {
	e := newReal(t, nil)
	clients := []*padlock.Client{e.c, padlock.New(e.raw), padlock.New(e.srv.Client())}
	for _, c := range clients[1:] {
		defer c.Close()
	}
	two := padlock.WithLimit(2)
	var holders []*padlock.Lock
	for range 2 {
		l, err := e.c.TryAcquire(e.ctx, e.key, 30*time.Second, two)
		require.NoError(t, err)
		holders = append(holders, l)
	}
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range 6 {
		c := clients[i%3]
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
			defer cancel()
			l, err := c.Acquire(ctx, e.key, 30*time.Second, two)
			if !assert.NoError(t, err, "waiter %d", i) {
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			assert.NoError(t, l.Release(e.ctx))
		})
		time.Sleep(60 * time.Millisecond) // arrive in order
	}
	info, err := e.c.Inspect(e.ctx, e.key)
	require.NoError(t, err)
	assert.Equal(t, 6, info.Waiting, "all queue in Redis")
	for _, l := range holders {
		require.NoError(t, l.Release(e.ctx))
	}
	wg.Wait()
	// Two places: the waiters go in pairs, each pair in either order.
	require.Len(t, order, 6)
	for i := 0; i < 6; i += 2 {
		pair := []int{order[i], order[i+1]}
		slices.Sort(pair)
		assert.Equal(t, []int{i, i + 1}, pair, "admitted in order of arrival: %v", order)
	}
}

// A kept-alive place outlives its ttl.
func TestSemaphoreKeepAlive(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	l, err := e.c.TryAcquire(e.ctx, e.key, 300*time.Millisecond, padlock.WithLimit(1))
	require.NoError(t, err)
	kctx, stop := l.KeepAlive(e.ctx)
	time.Sleep(time.Second)
	require.NoError(t, kctx.Err())
	_, err = e.c.TryAcquire(e.ctx, e.key, time.Second, padlock.WithLimit(1))
	require.ErrorIs(t, err, padlock.ErrNotAcquired, "still held after three ttls")
	stop()
	require.NoError(t, l.Release(e.ctx))
}

// 12 goroutines over 3 Clients, 8 rounds each through Do, with n = 3:
// never more than 3 inside, and they do overlap.
func TestSemaphoreDoUnderContention(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	clients := []*padlock.Client{e.c, padlock.New(e.raw), padlock.New(e.srv.Client())}
	for _, c := range clients[1:] {
		defer c.Close()
	}
	var inside, most atomic.Int64
	var wg sync.WaitGroup
	fast := padlock.WithBackoff(padlock.ExponentialBackoff(time.Millisecond, 20*time.Millisecond))
	for g := range 12 {
		c := clients[g%3]
		wg.Go(func() {
			for r := range 8 {
				ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
				err := c.Do(ctx, e.key, 5*time.Second, func(ctx context.Context) error {
					n := inside.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					time.Sleep(5 * time.Millisecond)
					inside.Add(-1)
					return nil
				}, padlock.WithLimit(3), padlock.WithFencing(), fast)
				cancel()
				assert.NoError(t, err, "goroutine %d round %d", g, r)
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, most.Load(), int64(3), "never more than 3 inside")
	assert.GreaterOrEqual(t, most.Load(), int64(2), "they overlap")
	t.Logf("at most %d inside at once", most.Load())
}

func TestSharedHolds(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		c2 := padlock.New(e.raw)
		defer c2.Close()
		var readers []*padlock.Lock
		for i := range 5 {
			c := []*padlock.Client{e.c, c2}[i%2]
			l, err := c.TryAcquire(e.ctx, e.key, 10*time.Second, padlock.WithShared())
			require.NoError(t, err, "shared holder %d", i)
			readers = append(readers, l)
		}
		info, err := e.c.Inspect(e.ctx, e.key)
		require.NoError(t, err)
		assert.Equal(t, "shared", info.Kind)
		assert.Len(t, info.Holders, 5)

		_, err = e.c.TryAcquire(e.ctx, e.key, time.Second)
		require.ErrorIs(t, err, padlock.ErrNotAcquired, "exclusive refused while shared holders hold")
		for _, l := range readers[:4] {
			require.NoError(t, l.Release(e.ctx))
		}
		_, err = c2.TryAcquire(e.ctx, e.key, time.Second)
		require.ErrorIs(t, err, padlock.ErrNotAcquired, "while any holds")
		require.NoError(t, readers[4].Release(e.ctx))

		w, err := e.c.TryAcquire(e.ctx, e.key, 10*time.Second)
		require.NoError(t, err, "exclusive once all left")
		_, err = c2.TryAcquire(e.ctx, e.key, time.Second, padlock.WithShared())
		require.ErrorIs(t, err, padlock.ErrNotAcquired, "shared refused while exclusive holds")
		require.NoError(t, w.Release(e.ctx))
		r, err := c2.TryAcquire(e.ctx, e.key, time.Second, padlock.WithShared())
		require.NoError(t, err)
		require.NoError(t, r.Release(e.ctx))
		assert.Zero(t, e.raw.Exists(e.ctx, e.key).Val(), "nothing left")
	})
}

// Writers first: a waiting exclusive Acquire keeps new shared holds out,
// and gets the lock as soon as the last shared holder leaves.
func TestSharedWaitingWriterGoesFirst(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	other := padlock.New(e.raw)
	defer other.Close()
	r1, err := e.c.TryAcquire(e.ctx, e.key, 30*time.Second, padlock.WithShared())
	require.NoError(t, err)
	r2, err := other.TryAcquire(e.ctx, e.key, 30*time.Second, padlock.WithShared())
	require.NoError(t, err)

	got := make(chan time.Time, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		w, err := other.Acquire(e.ctx, e.key, 30*time.Second, slow)
		if assert.NoError(t, err) {
			got <- time.Now()
			time.Sleep(100 * time.Millisecond)
			assert.NoError(t, w.Release(e.ctx))
		}
	})
	waitFor(t, e, 1)
	_, err = e.c.TryAcquire(e.ctx, e.key, time.Second, padlock.WithShared())
	require.ErrorIs(t, err, padlock.ErrNotAcquired, "a new shared hold waits behind the writer")

	// A shared Acquire waits too, and gets in after the writer.
	readerIn := make(chan time.Time, 1)
	wg.Go(func() {
		l, err := e.c.Acquire(e.ctx, e.key, 30*time.Second, padlock.WithShared(), slow)
		if assert.NoError(t, err) {
			readerIn <- time.Now()
			assert.NoError(t, l.Release(e.ctx))
		}
	})
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, r1.Release(e.ctx))
	released := time.Now()
	require.NoError(t, r2.Release(e.ctx))
	var writerAt time.Time
	select {
	case writerAt = <-got:
		assert.Less(t, writerAt.Sub(released), 300*time.Millisecond, "promptly after the last shared holder left")
	case <-time.After(5 * time.Second):
		t.Fatal("the writer did not get the lock")
	}
	select {
	case at := <-readerIn:
		assert.True(t, at.After(writerAt), "the waiting reader got in after the writer")
		assert.Less(t, at.Sub(writerAt), time.Second, "woken by the writer's release")
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting reader did not get in")
	}
}

// Shared Do calls overlap, and are kept alive past their ttl.
func TestSharedDoOverlapsAndIsKeptAlive(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	var inside, most atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			err := e.c.Do(e.ctx, e.key, 300*time.Millisecond, func(ctx context.Context) error {
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				select {
				case <-time.After(time.Second): // over three ttls
				case <-ctx.Done():
					return context.Cause(ctx)
				}
				inside.Add(-1)
				return nil
			}, padlock.WithShared())
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	assert.Equal(t, int64(4), most.Load(), "all four inside at once")
	assert.Zero(t, e.raw.Exists(e.ctx, e.key).Val())
}
