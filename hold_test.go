package padlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/redistest"
)

// A holdKind is a kind of hold the WithMinHold and WithMaxHold tests take:
// the holder's options, and a waiter's.
type holdKind struct {
	name       string
	hold, wait []padlock.Option
}

// holdKinds are a lock, a semaphore place and a shared hold (for which a
// writer waits).
var holdKinds = []holdKind{
	{"lock", nil, nil},
	{"semaphore", []padlock.Option{padlock.WithLimit(1)}, []padlock.Option{padlock.WithLimit(1)}},
	{"shared", []padlock.Option{padlock.WithShared()}, nil},
}

// WithMaxHold(2s) with a 600ms ttl, kept alive: renewing stops 2s after
// the acquire, the KeepAlive context ends with ErrMaxHold and ErrLost
// between 2.0s and 2.0s + ttl after it, a waiter gets the lock then, and
// Extend past the cap is ErrMaxHold. For a lock, a semaphore place, a
// shared hold, and on Redlock.
func TestWithMaxHold(t *testing.T) {
	t.Parallel() // mostly waits, on servers of its own
	const maxHold, ttl = 2 * time.Second, 600 * time.Millisecond
	// run: holder takes key with hold, kept alive; waiter waits with wait.
	run := func(t *testing.T, holder, waiter *padlock.Client, key string, hold, wait []padlock.Option) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		acquired := time.Now()
		l, err := holder.TryAcquire(ctx, key, ttl, append(hold, padlock.WithMaxHold(maxHold))...)
		require.NoError(t, err)
		kctx, stop := l.KeepAlive(ctx)
		defer stop()
		got := acquireLater(ctx, waiter, key, ttl, wait...)
		<-kctx.Done()
		ended := time.Since(acquired)
		cause := context.Cause(kctx)
		require.ErrorIs(t, cause, padlock.ErrMaxHold)
		require.ErrorIs(t, cause, padlock.ErrLost)
		assert.GreaterOrEqual(t, ended, maxHold, "not before the maximum")
		assert.Less(t, ended, maxHold+ttl, "at the lock's expiry, not later")
		require.ErrorIs(t, l.Extend(ctx, ttl), padlock.ErrMaxHold, "no Extend past the cap")
		w := <-got
		require.NoError(t, w.err, "a waiter gets the lock when it expires")
		assert.Less(t, time.Since(acquired), maxHold+ttl+time.Second)
		require.NoError(t, w.l.Release(ctx))
	}
	e := newReal(t, nil)
	for _, k := range holdKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			cs := moreClients(t, e, 2)
			run(t, cs[0], cs[1], "lock:"+t.Name(), k.hold, k.wait)
		})
	}
	t.Run("redlock", func(t *testing.T) {
		t.Parallel()
		r := startRedlock(t, 3)
		run(t, r.c, startRedlockOver(t, r), "lock:maxhold:redlock", nil, nil)
	})
}

// Bad input: a maximum of zero or less is ErrInvalid, and nothing is
// taken; a lock without WithMaxHold is kept alive past any such time.
func TestWithMaxHoldBadInput(t *testing.T) {
	t.Parallel()
	e := newMini(t)
	for _, d := range []time.Duration{0, -time.Second} {
		_, err := e.c.TryAcquire(e.ctx, e.key, time.Second, padlock.WithMaxHold(d))
		require.ErrorIs(t, err, padlock.ErrInvalid)
		assert.False(t, e.mr.Exists(e.key), "nothing taken")
	}
	l, err := e.c.TryAcquire(e.ctx, e.key, time.Second, padlock.WithMaxHold(time.Hour))
	require.NoError(t, err)
	require.NoError(t, l.Extend(e.ctx, time.Second), "before the maximum, Extend works")
	require.NoError(t, l.Release(e.ctx))
	assert.False(t, errors.Is(padlock.ErrMaxHold, padlock.ErrLost), "two errors, matched together only as a cause")
}

// WithMinHold(1s) on every instance's tick: 5 Clients each run TryDo with
// a 20ms job every 100ms for 5s, and the job runs once per second in all.
// For a lock, a semaphore place of one, and on Redlock (5 Redlock Clients
// over 3 nodes). (Shared holds overlap by design: once per interval is not
// theirs.)
func TestWithMinHoldRunsOncePerInterval(t *testing.T) {
	longOnly(t)
	t.Parallel() // mostly waits, on servers of its own
	e := newReal(t, nil)
	t.Run("lock", func(t *testing.T) {
		t.Parallel()
		oncePerInterval(t, moreClients(t, e, 5), "lock:"+t.Name())
	})
	t.Run("semaphore", func(t *testing.T) {
		t.Parallel()
		oncePerInterval(t, moreClients(t, e, 5), "lock:"+t.Name(), padlock.WithLimit(1))
	})
	t.Run("redlock", func(t *testing.T) {
		t.Parallel()
		r := startRedlock(t, 3)
		cs := []*padlock.Client{r.c}
		for range 4 {
			cs = append(cs, startRedlockOver(t, r))
		}
		oncePerInterval(t, cs, "lock:once:redlock")
	})
}

// oncePerInterval has each of cs run TryDo on key with opts and
// WithMinHold(1s), a 20ms job, every 100ms for 5s: the job must run 5 or 6
// times in all, each run at least 1s after the previous.
func oncePerInterval(t *testing.T, cs []*padlock.Client, key string, opts ...padlock.Option) {
	const minHold, tick, span = time.Second, 100 * time.Millisecond, 5 * time.Second
	type run struct{ sent, started time.Time }
	var mu sync.Mutex
	var runs []run
	var wg sync.WaitGroup
	end := time.Now().Add(span)
	for _, c := range cs {
		wg.Go(func() {
			for time.Now().Before(end) {
				sent := time.Now()
				err := c.TryDo(t.Context(), key, 10*time.Second, func(context.Context) error {
					mu.Lock()
					runs = append(runs, run{sent, time.Now()})
					mu.Unlock()
					time.Sleep(20 * time.Millisecond)
					return nil
				}, append(opts, padlock.WithMinHold(minHold))...)
				if err != nil && !errors.Is(err, padlock.ErrNotAcquired) {
					t.Error(err)
					return
				}
				time.Sleep(tick)
			}
		})
	}
	wg.Wait()
	require.True(t, len(runs) == 5 || len(runs) == 6, "once per second for 5s, not on every tick: %d runs", len(runs))
	for i := 1; i < len(runs); i++ {
		// Redis took the lock for run i at least 1s after it took it for
		// run i-1: between the acquire's send and the job's start of each.
		assert.GreaterOrEqual(t, runs[i].started.Sub(runs[i-1].sent), minHold, "run %d", i)
	}
}

// Release under a minimum: the key stays held by the same token (and
// fence) until the minimum, then a waiter gets it within 100ms of that
// moment; released after the minimum, the key is freed at once. For a
// lock, a semaphore place, a shared hold, and on Redlock; and for a
// release by another process (Resume).
func TestReleaseUnderMinHold(t *testing.T) {
	t.Parallel() // mostly waits, on servers of its own
	const minHold, ttl = time.Second, 10 * time.Second
	// run: holder takes key with hold and a minimum, and releaser (the
	// holder, or another Client by Resume) releases it early; waiter waits
	// with wait.
	run := func(t *testing.T, holder, releaser, waiter *padlock.Client, key string, hold, wait []padlock.Option) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		sent := time.Now()
		l, err := holder.TryAcquire(ctx, key, ttl, append(hold, padlock.WithMinHold(minHold))...)
		require.NoError(t, err)
		took := time.Now()
		got := acquireLater(ctx, waiter, key, ttl, wait...)
		time.Sleep(200 * time.Millisecond)
		if releaser != holder {
			l, err = releaser.Resume(ctx, key, l.Token())
			require.NoError(t, err)
		}
		require.NoError(t, l.Release(ctx), "a release under the minimum is not an error")
		info, err := releaser.Inspect(ctx, key)
		require.NoError(t, err)
		require.True(t, info.Held, "held until the minimum")
		assert.Contains(t, tokens(info), l.Token(), "by the same token")
		select {
		case w := <-got:
			t.Fatalf("a waiter got the key under the minimum: %v", w.err)
		case <-time.After(time.Until(sent.Add(minHold - 50*time.Millisecond))):
		}
		w := <-got
		require.NoError(t, w.err)
		at := time.Now()
		assert.GreaterOrEqual(t, at.Sub(sent), minHold, "not before the minimum")
		assert.Less(t, at.Sub(took), minHold+100*time.Millisecond, "served at the minimum")
		require.NoError(t, w.l.Release(ctx))
	}
	e := newReal(t, nil)
	for _, k := range append(holdKinds, holdKind{"fenced", []padlock.Option{padlock.WithFencing()}, nil}) {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			cs := moreClients(t, e, 2)
			run(t, cs[0], cs[0], cs[1], "lock:"+t.Name(), k.hold, k.wait)
		})
	}
	t.Run("resumed", func(t *testing.T) {
		t.Parallel()
		cs := moreClients(t, e, 3)
		run(t, cs[0], cs[2], cs[1], "lock:"+t.Name(), nil, nil)
	})
	t.Run("redlock", func(t *testing.T) {
		t.Parallel()
		r := startRedlock(t, 3)
		other := startRedlockOver(t, r)
		run(t, r.c, r.c, other, "lock:minhold:redlock", nil, nil)
	})
	t.Run("after", func(t *testing.T) {
		t.Parallel()
		cs := moreClients(t, e, 2)
		key := "lock:" + t.Name()
		l, err := cs[0].TryAcquire(t.Context(), key, ttl, padlock.WithMinHold(100*time.Millisecond))
		require.NoError(t, err)
		got := acquireLater(t.Context(), cs[1], key, ttl)
		time.Sleep(300 * time.Millisecond)
		released := time.Now()
		require.NoError(t, l.Release(t.Context()))
		w := <-got
		require.NoError(t, w.err)
		assert.Less(t, time.Since(released), 100*time.Millisecond, "freed at once after the minimum")
		require.NoError(t, w.l.Release(t.Context()))
	})
}

// tokens are the tokens that hold a key, as Inspect shows it.
func tokens(info padlock.LockInfo) []string {
	if info.Token != "" {
		return []string{info.Token}
	}
	var ts []string
	for _, h := range info.Holders {
		ts = append(ts, h.Token)
	}
	return ts
}

// A minimum is kept in Redis with the hold: a holder that dies frees the
// key at the later of its ttl and its minimum; no Extend shortens it;
// Inspect shows the key held by its token, with its ttl; the fence stays;
// and a waiter granted the lock with a minimum keeps it too.
func TestMinHoldIsKeptInRedis(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		l, err := e.c.TryAcquire(e.ctx, e.key, 200*time.Millisecond, padlock.WithMinHold(time.Minute), padlock.WithFencing())
		require.NoError(t, err)
		assert.Greater(t, e.pttl(e.key), 59*time.Second, "a holder that dies frees it at its minimum")
		require.NoError(t, l.Extend(e.ctx, 100*time.Millisecond))
		assert.Greater(t, e.pttl(e.key), 59*time.Second, "Extend does not shorten the minimum")
		require.NoError(t, l.Release(e.ctx))
		info, err := e.c.Inspect(e.ctx, e.key)
		require.NoError(t, err)
		assert.True(t, info.Held)
		assert.Equal(t, l.Token(), info.Token)
		assert.Greater(t, info.TTL, 59*time.Second)
		assert.Equal(t, l.Fence(), info.Fence)
		_, err = e.c.TryAcquire(e.ctx, e.key, time.Second)
		require.ErrorIs(t, err, padlock.ErrNotAcquired)
		_, err = e.c.Break(e.ctx, e.key)
		require.NoError(t, err, "Break ends a minimum")

		long, err := e.c.TryAcquire(e.ctx, e.key+"2", time.Minute, padlock.WithMinHold(time.Second))
		require.NoError(t, err)
		assert.Greater(t, e.pttl(e.key+"2"), 59*time.Second, "the ttl, when longer than the minimum")
		require.NoError(t, long.Release(e.ctx))
	})
	t.Run("granted", func(t *testing.T) {
		e := newReal(t, nil)
		cs := moreClients(t, e, 2)
		h, err := cs[0].TryAcquire(e.ctx, e.key, time.Minute)
		require.NoError(t, err)
		got := acquireLater(e.ctx, cs[1], e.key, time.Minute, padlock.WithMinHold(time.Minute))
		time.Sleep(100 * time.Millisecond) // queued
		require.NoError(t, h.Release(e.ctx))
		w := <-got
		require.NoError(t, w.err)
		require.NoError(t, w.l.Release(e.ctx))
		_, err = e.c.TryAcquire(e.ctx, e.key, time.Second)
		require.ErrorIs(t, err, padlock.ErrNotAcquired, "granted with a minimum, kept for it")
		assert.Greater(t, e.pttl(e.key), 59*time.Second)
	})
}

// A failed acquire frees what it took at once, minimum or not: a Redlock
// attempt that took one node of three, short of a quorum, leaves nothing.
func TestFailedAcquireLeavesNoMinimum(t *testing.T) {
	t.Parallel()
	r := startRedlock(t, 3)
	const key = "lock:minhold:failed"
	for _, raw := range r.raws[1:] {
		require.NoError(t, raw.Set(t.Context(), key, "someone-else", time.Minute).Err())
	}
	_, err := r.c.TryAcquire(t.Context(), key, time.Minute, padlock.WithMinHold(time.Minute))
	require.ErrorIs(t, err, padlock.ErrNotAcquired)
	assert.Zero(t, r.raws[0].Exists(t.Context(), key).Val(), "the minority undone, minimum or not")
}

// Bad input: a minimum of zero or less, longer than the maximum, on a
// multi-key lock or a key that cannot have side keys is ErrInvalid, and
// nothing is taken.
func TestWithMinHoldBadInput(t *testing.T) {
	t.Parallel()
	e := newMini(t)
	for _, opts := range [][]padlock.Option{
		{padlock.WithMinHold(0)},
		{padlock.WithMinHold(-time.Second)},
		{padlock.WithMinHold(2 * time.Second), padlock.WithMaxHold(time.Second)},
	} {
		_, err := e.c.TryAcquire(e.ctx, e.key, time.Second, opts...)
		require.ErrorIs(t, err, padlock.ErrInvalid)
		assert.False(t, e.mr.Exists(e.key), "nothing taken")
	}
	_, err := e.c.TryAcquire(e.ctx, "lock:{a", time.Second, padlock.WithMinHold(time.Second))
	require.ErrorIs(t, err, padlock.ErrInvalid)
	_, err = e.c.TryAcquireMany(e.ctx, []string{e.key, e.key + "2"}, time.Second, padlock.WithMinHold(time.Second))
	require.ErrorIs(t, err, padlock.ErrInvalid)
	assert.Empty(t, e.mr.Keys(), "nothing taken")
	l, err := e.c.TryAcquire(e.ctx, e.key, time.Second, padlock.WithMinHold(time.Second), padlock.WithMaxHold(time.Second))
	require.NoError(t, err, "a minimum equal to the maximum")
	require.NoError(t, l.Release(e.ctx))
}

// At most once per interval holds as long as Redis keeps its data: after a
// restart without persistence the minimum is gone and the job runs again;
// with appendfsync always it is kept.
func TestMinHoldAcrossRestarts(t *testing.T) {
	t.Parallel()
	for _, aof := range []bool{false, true} {
		t.Run(fmt.Sprintf("aof=%v", aof), func(t *testing.T) {
			t.Parallel()
			var sopts []redistest.Option
			if aof {
				sopts = append(sopts, redistest.WithAOF())
			}
			e := newReal(t, sopts)
			runs := 0
			job := func(context.Context) error { runs++; return nil }
			require.NoError(t, e.c.TryDo(e.ctx, e.key, time.Minute, job, padlock.WithMinHold(time.Hour)))
			e.srv.Restart()
			err := e.c.TryDo(e.ctx, e.key, time.Minute, job, padlock.WithMinHold(time.Hour))
			if aof {
				require.ErrorIs(t, err, padlock.ErrNotAcquired)
				assert.Equal(t, 1, runs, "kept across the restart")
			} else {
				require.NoError(t, err)
				assert.Equal(t, 2, runs, "the minimum was lost with the data: the job ran again")
			}
		})
	}
}

// What ends a hold early keeps its minimum: an Extend that a paused
// replica did not acknowledge (the lock is released, but the minimum
// stays); and the same token taken again with a shorter minimum keeps the
// longer one it held with. Resume with WithMinHold takes Redis's minimum,
// not a new one: its Deadline is not later than the key's expiry.
func TestWhatEndsAHoldEarlyKeepsItsMinimum(t *testing.T) {
	t.Parallel() // starts servers of its own
	e := newReal(t, nil)
	replica := redistest.StartReplica(t, e.srv)
	c := padlock.New(e.rdb, padlock.WithReplicas(1, time.Second))
	defer c.Close()
	l, err := c.TryAcquire(e.ctx, e.key, time.Minute, padlock.WithMinHold(time.Hour))
	require.NoError(t, err)
	replica.Pause()
	require.ErrorIs(t, l.Extend(e.ctx, time.Minute), padlock.ErrNotReplicated)
	replica.Resume()
	assert.Greater(t, e.pttl(e.key), 59*time.Minute, "released, but kept for its minimum")

	key := e.key + ":job"
	first, err := e.c.TryAcquire(e.ctx, key, time.Minute, padlock.WithToken("job-1"), padlock.WithMinHold(time.Hour))
	require.NoError(t, err)
	require.NoError(t, first.Release(e.ctx))
	again, err := e.c.TryAcquire(e.ctx, key, time.Minute, padlock.WithToken("job-1"), padlock.WithMinHold(time.Millisecond))
	require.NoError(t, err, "its own token holds it")
	require.NoError(t, again.Release(e.ctx))
	assert.Greater(t, e.pttl(key), 59*time.Minute, "the longer minimum stays")

	short := e.key + ":short"
	h, err := e.c.TryAcquire(e.ctx, short, time.Minute, padlock.WithMinHold(2*time.Minute))
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond)
	r, err := e.c.Resume(e.ctx, short, h.Token(), padlock.WithMinHold(time.Hour))
	require.NoError(t, err)
	assert.False(t, r.Deadline().After(time.Now().Add(e.pttl(short))), "not later than the key's expiry")
}

// A waiter handed the lock by a release counts its WithMaxHold from the
// grant, not from when it queued: granted 1.5s into its wait (before its
// ticket's first renewal, at 2.5s), an Acquire(10s, WithMaxHold(1s)) is
// extended at once, and Extend is ErrMaxHold only once 1s has passed since
// the grant. For a lock, a semaphore place, and a writer after a shared
// hold.
func TestMaxHoldCountsFromTheHandOff(t *testing.T) {
	t.Parallel() // mostly waits, on servers of its own
	const maxHold, ttl = time.Second, 10 * time.Second
	e := newReal(t, nil)
	for _, k := range holdKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			cs := moreClients(t, e, 2)
			key := "lock:" + t.Name()
			h, err := cs[0].TryAcquire(t.Context(), key, ttl, k.hold...)
			require.NoError(t, err)
			got := acquireLater(t.Context(), cs[1], key, ttl, append(k.wait, padlock.WithMaxHold(maxHold))...)
			waitForOn(t, cs[0], key, 1)
			time.Sleep(maxHold + maxHold/2) // past the cap, counted from the queueing
			require.NoError(t, h.Release(t.Context()))
			w := <-got
			granted := time.Now()
			require.NoError(t, w.err)
			require.NoError(t, w.l.Extend(t.Context(), ttl), "the cap counts from the grant")
			time.Sleep(time.Until(granted.Add(maxHold)))
			require.ErrorIs(t, w.l.Extend(t.Context(), ttl), padlock.ErrMaxHold, "and caps it then")
			require.NoError(t, w.l.Release(t.Context()))
		})
	}
}

// An Acquire whose first take came back too late (and was undone) counts
// its WithMaxHold from the take that kept the lock: here another holder
// takes the key as the first take is undone, for longer than the cap, and
// the Lock that Acquire returns then may be extended at once.
func TestMaxHoldCountsFromTheTakeThatKeepsTheLock(t *testing.T) {
	e := newReal(t, nil)
	rdb := redis.NewClient(&redis.Options{Addr: e.srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	const ttl, maxHold = 500 * time.Millisecond, time.Second
	rdb.AddHook(&lateFirstTake{raw: e.raw, key: e.key, delay: ttl - ttl/20, hold: maxHold + maxHold/2})
	c := padlock.New(rdb)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	l, err := c.Acquire(ctx, e.key, ttl, padlock.WithMaxHold(maxHold),
		padlock.WithBackoff(padlock.ExponentialBackoff(10*time.Millisecond, 10*time.Millisecond)))
	require.NoError(t, err)
	t.Logf("acquired after %v", time.Since(start))
	require.NoError(t, l.Extend(e.ctx, ttl), "the cap counts from the take that kept the lock")
	require.NoError(t, l.Release(e.ctx))
}

// lateFirstTake delays the reply of the first script that takes the lock
// (wait.lua's {1, fence}) by delay, past its validity, so the take is
// undone; as the undo's release lands, another holder takes the key for
// hold.
type lateFirstTake struct {
	passHook
	raw   *redis.Client
	key   string
	delay time.Duration
	hold  time.Duration
	state atomic.Int32 // 0: before the take, 1: before the undo, 2: done
}

func (h *lateFirstTake) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if !isScript(cmd) {
			return err
		}
		switch h.state.Load() {
		case 0:
			if c, ok := cmd.(*redis.Cmd); ok {
				if r, _ := c.Slice(); len(r) > 0 && r[0] == int64(1) {
					h.state.Store(1)
					time.Sleep(h.delay)
				}
			}
		case 1:
			if err != nil {
				return err // NOSCRIPT: the release goes again as EVAL
			}
			h.state.Store(2)
			h.raw.SetNX(context.Background(), h.key, "another holder", h.hold)
		}
		return err
	}
}

// A hold resumed by another Client keeps the minimum Redis keeps it for:
// taken for 5s WithMinHold(2s), resumed and extended to 500ms, its
// Deadline is still the minimum's end, and a Release at 1.2s returns nil
// and leaves the key held by the token. For a lock, a semaphore place, a
// shared hold, a fenced lock, and on Redlock.
func TestResumedHoldKeepsItsMinimum(t *testing.T) {
	t.Parallel() // mostly waits, on servers of its own
	const minHold, ttl = 2 * time.Second, 5 * time.Second
	// run: holder takes key with hold and the minimum; resumer resumes it.
	run := func(t *testing.T, holder, resumer *padlock.Client, key string, hold []padlock.Option) {
		sent := time.Now()
		h, err := holder.TryAcquire(t.Context(), key, ttl, append(hold, padlock.WithMinHold(minHold))...)
		require.NoError(t, err)
		took := time.Now()
		r, err := resumer.Resume(t.Context(), key, h.Token())
		require.NoError(t, err)
		require.NoError(t, r.Extend(t.Context(), 500*time.Millisecond))
		assert.True(t, r.Deadline().After(sent.Add(minHold-300*time.Millisecond)), "Deadline counts the minimum: %v", r.Deadline().Sub(sent))
		assert.False(t, r.Deadline().After(took.Add(minHold)), "never later than the minimum's end")
		time.Sleep(time.Until(sent.Add(1200 * time.Millisecond)))
		require.NoError(t, r.Release(t.Context()), "held by its token until the minimum")
		info, err := resumer.Inspect(t.Context(), key)
		require.NoError(t, err)
		assert.True(t, info.Held, "kept for the minimum")
		assert.Contains(t, tokens(info), h.Token())
	}
	e := newReal(t, nil)
	for _, k := range append(holdKinds, holdKind{"fenced", []padlock.Option{padlock.WithFencing()}, nil}) {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			cs := moreClients(t, e, 2)
			run(t, cs[0], cs[1], "lock:"+t.Name(), k.hold)
		})
	}
	t.Run("redlock", func(t *testing.T) {
		t.Parallel()
		r := startRedlock(t, 3)
		run(t, r.c, startRedlockOver(t, r), "lock:resumed-minimum:redlock", nil)
	})
}
