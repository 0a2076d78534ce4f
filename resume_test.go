package padlock_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
)

// A lock, a semaphore place and a shared hold taken in a child process
// are resumed here by their token: Fence, TTL, Extend, KeepAlive and
// Release work on them, and the child's lease learns that it is gone.
func TestResumeAHolderOfAnotherProcess(t *testing.T) {
	t.Parallel() // mostly waits, on servers of its own
	for _, kind := range []string{"lock", "semaphore", "shared"} {
		t.Run(kind, func(t *testing.T) {
			e := newReal(t, nil)
			ch := startChild(t, "holder", map[string]string{"ADDR": e.srv.Addr(), "KEY": e.key, "REG": e.key + ":reg", "TTL": "3s", "KIND": kind})
			var fence int64
			_, err := fmtSscan(ch.expect(t, "acquired fence=", 10*time.Second), "acquired fence=%d", &fence)
			require.NoError(t, err)
			require.Positive(t, fence)
			ch.send(t, "token")
			token := strings.TrimPrefix(ch.expect(t, "token ", 5*time.Second), "token ")

			_, err = e.c.Resume(e.ctx, e.key, token+"x", padlock.WithFencing())
			require.ErrorIs(t, err, padlock.ErrNotHeld, "a wrong token")

			sent := time.Now()
			l, err := e.c.Resume(e.ctx, e.key, token, padlock.WithFencing())
			require.NoError(t, err)
			assert.Equal(t, fence, l.Fence(), "the holder's fence")
			assert.Equal(t, token, l.Token())
			assert.False(t, l.Deadline().After(sent.Add(3*time.Second)), "the deadline counts from before the round trip")
			assert.True(t, l.Deadline().After(time.Now().Add(time.Second)), "with what Redis says is left")
			ttl, err := l.TTL(e.ctx)
			require.NoError(t, err)
			assert.Greater(t, ttl, time.Second)

			require.NoError(t, l.Extend(e.ctx, 20*time.Second))
			ttl, err = l.TTL(e.ctx)
			require.NoError(t, err)
			assert.Greater(t, ttl, 15*time.Second, "extended here")

			kctx, stop := l.KeepAlive(e.ctx)
			time.Sleep(200 * time.Millisecond)
			require.NoError(t, kctx.Err())
			stop()

			// Another Client cannot take what the resumed Lock holds.
			switch kind {
			case "lock":
				_, err = padlock.New(e.raw).TryAcquire(e.ctx, e.key, time.Second)
			case "semaphore":
				_, err = padlock.New(e.raw).TryAcquire(e.ctx, e.key, time.Second, padlock.WithLimit(1))
			case "shared":
				_, err = padlock.New(e.raw).TryAcquire(e.ctx, e.key, time.Second)
			}
			require.ErrorIs(t, err, padlock.ErrNotAcquired)

			require.NoError(t, l.Release(e.ctx))
			info, err := e.c.Inspect(e.ctx, e.key)
			require.NoError(t, err)
			assert.False(t, info.Held, "released by the resumed Lock")
			ch.send(t, "extend")
			assert.Equal(t, "extend ErrNotHeld", ch.expect(t, "extend", 5*time.Second), "the child's Lock does not hold it any more")
			_, err = e.c.Resume(e.ctx, e.key, token)
			require.ErrorIs(t, err, padlock.ErrNotHeld, "released")
		})
	}
}

// fmtSscan is fmt.Sscanf, for the child's lines.
func fmtSscan(s, format string, args ...any) (int, error) {
	return fmt.Sscanf(s, format, args...)
}

func TestResume(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		other := padlock.New(e.raw)
		orig, err := e.c.TryAcquire(e.ctx, e.key, 5*time.Second, padlock.WithMetadata("job 7 on host-a"))
		require.NoError(t, err)

		l, err := other.Resume(e.ctx, e.key, orig.Token())
		require.NoError(t, err)
		assert.Equal(t, "job 7 on host-a", l.Metadata())
		assert.Equal(t, e.key, l.Key())
		assert.Zero(t, l.Fence(), "not fenced")
		if e.srv != nil { // miniredis's clock stands still
			left := e.pttl(e.key)
			assert.False(t, l.Deadline().After(time.Now().Add(left+time.Millisecond)), "never later than the expiry in Redis")
		}

		// Bad input changes nothing.
		_, err = other.Resume(e.ctx, "", orig.Token())
		require.ErrorIs(t, err, padlock.ErrInvalid)
		_, err = other.Resume(e.ctx, e.key, "")
		require.ErrorIs(t, err, padlock.ErrInvalid)
		_, err = other.Resume(e.ctx, e.key+":other", orig.Token())
		require.ErrorIs(t, err, padlock.ErrNotHeld, "a key nobody holds")

		require.NoError(t, l.Release(e.ctx))
		require.ErrorIs(t, orig.Release(e.ctx), padlock.ErrNotHeld, "released through the resumed Lock")
		_, err = other.Resume(e.ctx, e.key, orig.Token())
		require.ErrorIs(t, err, padlock.ErrNotHeld)
	})
}

// WithToken: the same token takes the lock again (the ttl set anew, the
// fence the same); another token is refused; bad tokens are ErrInvalid.
func TestWithToken(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		const job = "deploy-2026-12-01/build#418"
		a, err := e.c.TryAcquire(e.ctx, e.key, 2*time.Second, padlock.WithToken(job), padlock.WithFencing())
		require.NoError(t, err)
		assert.Equal(t, job, a.Token())
		assert.Equal(t, job, unspanned(e.get(e.key)))
		if e.mr != nil {
			e.mr.FastForward(time.Second)
		} else {
			time.Sleep(500 * time.Millisecond)
		}
		before := e.pttl(e.key)

		again := padlock.New(e.raw) // a restarted process
		b, err := again.TryAcquire(e.ctx, e.key, 10*time.Second, padlock.WithToken(job), padlock.WithFencing(), padlock.WithMetadata("restarted"))
		require.NoError(t, err, "the same token holds it")
		assert.Equal(t, a.Fence(), b.Fence(), "the fence stays")
		assert.Greater(t, e.pttl(e.key), before+5*time.Second, "the ttl is set anew")
		assert.Equal(t, job+" restarted", unspanned(e.get(e.key)), "with this call's metadata")
		require.NoError(t, a.Extend(e.ctx, 10*time.Second), "the token is compared, not the metadata")
		_, err = a.TTL(e.ctx)
		require.NoError(t, err)

		_, err = again.TryAcquire(e.ctx, e.key, time.Second, padlock.WithToken(job+"-other"))
		require.ErrorIs(t, err, padlock.ErrNotAcquired, "another token")
		_, err = again.TryAcquire(e.ctx, e.key, time.Second)
		require.ErrorIs(t, err, padlock.ErrNotAcquired, "a random token")

		// Acquire succeeds at once, in the holder's own Client too.
		ctx, cancel := context.WithTimeout(e.ctx, 2*time.Second)
		defer cancel()
		c, err := e.c.Acquire(ctx, e.key, 10*time.Second, padlock.WithToken(job), padlock.WithFencing())
		require.NoError(t, err)
		assert.Equal(t, a.Fence(), c.Fence())

		require.NoError(t, b.Release(e.ctx))
		require.ErrorIs(t, a.Release(e.ctx), padlock.ErrNotHeld, "one lock: released once")

		many := []string{e.key + ":{m}:1", e.key + ":{m}:2"}
		m1, err := e.c.TryAcquireMany(e.ctx, many, time.Second, padlock.WithToken(job))
		require.NoError(t, err)
		m2, err := again.TryAcquireMany(e.ctx, many, time.Second, padlock.WithToken(job), padlock.WithMetadata("again"))
		require.NoError(t, err, "TryAcquireMany takes its own token's keys again")
		require.NoError(t, m2.Release(e.ctx))
		require.ErrorIs(t, m1.Release(e.ctx), padlock.ErrNotHeld)

		for _, bad := range []string{"", "two words", "tab\there", "line\n", strings.Repeat("x", 1025), "padlock:shared"} {
			_, err := e.c.TryAcquire(e.ctx, e.key, time.Second, padlock.WithToken(bad))
			require.ErrorIs(t, err, padlock.ErrInvalid, "token %q", bad)
		}
		info, err := e.c.Inspect(e.ctx, e.key)
		require.NoError(t, err)
		assert.False(t, info.Held, "bad tokens took nothing")
		long, err := e.c.TryAcquire(e.ctx, e.key, time.Second, padlock.WithToken(strings.Repeat("x", 1024)))
		require.NoError(t, err, "1024 bytes is the limit")
		require.NoError(t, long.Release(e.ctx))
	})
}

// A chosen token holds one place of a semaphore, and one shared hold,
// however often it acquires.
func TestWithTokenCounted(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	for i, opt := range []padlock.Option{padlock.WithLimit(2), padlock.WithShared()} {
		key := e.key + ":" + strconv.Itoa(i)
		a, err := e.c.TryAcquire(e.ctx, key, 5*time.Second, opt, padlock.WithToken("worker-1"), padlock.WithFencing())
		require.NoError(t, err)
		b, err := padlock.New(e.raw).TryAcquire(e.ctx, key, 5*time.Second, opt, padlock.WithToken("worker-1"), padlock.WithFencing(), padlock.WithMetadata("restarted"))
		require.NoError(t, err)
		assert.Equal(t, a.Fence(), b.Fence())
		info, err := e.c.Inspect(e.ctx, key)
		require.NoError(t, err)
		require.Len(t, info.Holders, 1, "one place for one token")
		assert.Equal(t, "restarted", info.Holders[0].Metadata)
		require.NoError(t, b.Release(e.ctx))
	}
}

// Break ends a fenced lock: it returns the holder, advances the counter,
// hands the lock to a waiter at once, and the holder's lease ends with
// ErrLost.
func TestBreak(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	holder, err := e.c.TryAcquire(e.ctx, e.key, 900*time.Millisecond, padlock.WithFencing(), padlock.WithMetadata("stuck job"))
	require.NoError(t, err)
	kctx, stop := holder.KeepAlive(e.ctx)
	defer stop()

	waiterRDB := redis.NewClient(&redis.Options{Addr: e.srv.Addr()})
	defer waiterRDB.Close()
	waiters := padlock.New(waiterRDB, padlock.WithBackoff(padlock.ExponentialBackoff(time.Hour, time.Hour)))
	defer waiters.Close()
	got := make(chan *padlock.Lock, 1)
	go func() {
		ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
		defer cancel()
		l, err := waiters.Acquire(ctx, e.key, 10*time.Second, padlock.WithFencing())
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, e, 1)

	operator := padlock.New(e.raw)
	broke := time.Now()
	info, err := operator.Break(e.ctx, e.key)
	require.NoError(t, err)
	assert.True(t, info.Held)
	assert.Equal(t, "lock", info.Kind)
	assert.Equal(t, holder.Token(), info.Token)
	assert.Equal(t, "stuck job", info.Metadata)
	assert.Equal(t, holder.Fence(), info.Fence)

	var next *padlock.Lock
	select {
	case next = <-got:
	case <-time.After(time.Second):
		t.Fatal("the waiter was not served within a second")
	}
	require.NotNil(t, next)
	assert.GreaterOrEqual(t, next.Fence(), holder.Fence()+2, "the counter was advanced")

	select {
	case <-kctx.Done():
		assert.ErrorIs(t, context.Cause(kctx), padlock.ErrLost)
		assert.Less(t, time.Since(broke), 900*time.Millisecond, "within a renewal period")
	case <-time.After(2 * time.Second):
		t.Fatal("the broken holder's lease did not end")
	}
	require.ErrorIs(t, holder.Release(e.ctx), padlock.ErrNotHeld)
	require.NoError(t, next.Release(e.ctx))

	// Nobody holds it: nothing changes.
	fence := e.get(fenceKey(e.key))
	info, err = operator.Break(e.ctx, e.key)
	require.NoError(t, err)
	assert.False(t, info.Held)
	assert.Equal(t, fence, e.get(fenceKey(e.key)), "the counter stays")

	_, err = operator.Break(e.ctx, "")
	require.ErrorIs(t, err, padlock.ErrInvalid)
}

// Break ends every holder of a semaphore and of a shared hold.
func TestBreakCounted(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		for i, opt := range []padlock.Option{padlock.WithLimit(3), padlock.WithShared()} {
			key := e.key + ":" + strconv.Itoa(i)
			var ls []*padlock.Lock
			for range 3 {
				l, err := e.c.TryAcquire(e.ctx, key, 10*time.Second, opt, padlock.WithFencing())
				require.NoError(t, err)
				ls = append(ls, l)
			}
			info, err := padlock.New(e.raw).Break(e.ctx, key)
			require.NoError(t, err)
			assert.True(t, info.Held)
			assert.Len(t, info.Holders, 3)
			for _, l := range ls {
				require.ErrorIs(t, l.Extend(e.ctx, time.Minute), padlock.ErrNotHeld)
				require.ErrorIs(t, l.Release(e.ctx), padlock.ErrNotHeld)
			}
			l, err := e.c.TryAcquire(e.ctx, key, time.Second) // a lock: no holder is left
			require.NoError(t, err, "free again")
			require.NoError(t, l.Release(e.ctx))
		}
	})
}

// A chosen token that gave up waiting waits again: its earlier leave does
// not keep it out (nor make it spin).
func TestWithTokenWaitsAgainAfterGivingUp(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	held, err := padlock.New(e.raw).TryAcquire(e.ctx, e.key, 10*time.Second)
	require.NoError(t, err)
	for range 2 {
		ctx, cancel := context.WithTimeout(e.ctx, 200*time.Millisecond)
		e.n.reset()
		_, err := e.c.Acquire(ctx, e.key, time.Second, padlock.WithToken("job-9"))
		cancel()
		require.ErrorIs(t, err, padlock.ErrNotAcquired, "held: contention, not an error")
		trips, _ := e.n.reset()
		assert.Less(t, trips, 20, "a wait, not a loop")
	}
	time.AfterFunc(100*time.Millisecond, func() { _ = held.Release(context.Background()) })
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	l, err := e.c.Acquire(ctx, e.key, time.Second, padlock.WithToken("job-9"))
	require.NoError(t, err)
	require.NoError(t, l.Release(e.ctx))

	// The same token with another n than the semaphore's is refused.
	_, err = e.c.TryAcquire(e.ctx, e.key+":sem", time.Second, padlock.WithLimit(3), padlock.WithToken("job-9"))
	require.NoError(t, err)
	_, err = e.c.TryAcquire(e.ctx, e.key+":sem", time.Second, padlock.WithLimit(5), padlock.WithToken("job-9"))
	require.ErrorIs(t, err, padlock.ErrInvalid)
}

// Resume, with no option, returns the holder's own fence, recorded in Redis
// beside it, for every kind; 0 exactly when the holder took none. A
// chosen token that took a key unfenced and takes it again fenced gets a
// fence above every earlier holder's. On miniredis and a real Redis.
func TestResumeHasTheHoldersFence(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		other := padlock.New(e.rdb)
		defer other.Close()
		for _, k := range []struct {
			name string
			opts []padlock.Option
		}{{"lock", nil}, {"semaphore", []padlock.Option{padlock.WithLimit(2)}}, {"shared", []padlock.Option{padlock.WithShared()}}} {
			key := e.key + ":" + k.name
			// Earlier holders move the counter first.
			for range 2 {
				l, err := e.c.TryAcquire(e.ctx, key, time.Minute, append(k.opts, padlock.WithFencing())...)
				require.NoError(t, err)
				require.NoError(t, l.Release(e.ctx))
			}
			fenced, err := e.c.TryAcquire(e.ctx, key, time.Minute, append(k.opts, padlock.WithFencing())...)
			require.NoError(t, err)
			// A later fence handed out meanwhile (another semaphore place,
			// or a plain lock taken after this one: the counter moves on).
			r, err := other.Resume(e.ctx, key, fenced.Token())
			require.NoError(t, err, k.name)
			assert.Equal(t, fenced.Fence(), r.Fence(), "%s: the holder's own fence", k.name)
			assert.Positive(t, r.Fence())
			require.NoError(t, r.Extend(e.ctx, time.Minute))
			r, err = other.Resume(e.ctx, key, fenced.Token(), padlock.WithFencing())
			require.NoError(t, err)
			assert.Equal(t, fenced.Fence(), r.Fence(), "%s: WithFencing changes nothing", k.name)
			require.NoError(t, r.Release(e.ctx))

			plain, err := e.c.TryAcquire(e.ctx, key, time.Minute, k.opts...)
			require.NoError(t, err)
			r, err = other.Resume(e.ctx, key, plain.Token())
			require.NoError(t, err)
			assert.Zero(t, r.Fence(), "%s: a holder that took no fence has none", k.name)
			require.NoError(t, r.Release(e.ctx))
		}

		// A chosen token: unfenced, then fenced: above every earlier fence.
		key := e.key + ":chosen"
		var last int64
		for range 2 {
			l, err := e.c.TryAcquire(e.ctx, key, time.Minute, padlock.WithFencing())
			require.NoError(t, err)
			last = l.Fence()
			require.NoError(t, l.Release(e.ctx))
		}
		job := padlock.WithToken("job-7")
		_, err := e.c.TryAcquire(e.ctx, key, time.Minute, job)
		require.NoError(t, err)
		again, err := e.c.TryAcquire(e.ctx, key, time.Minute, job, padlock.WithFencing())
		require.NoError(t, err)
		assert.Greater(t, again.Fence(), last, "above every earlier holder's")
		r, err := other.Resume(e.ctx, key, "job-7")
		require.NoError(t, err)
		assert.Equal(t, again.Fence(), r.Fence())
		third, err := e.c.TryAcquire(e.ctx, key, time.Minute, job, padlock.WithFencing())
		require.NoError(t, err)
		assert.Equal(t, again.Fence(), third.Fence(), "the same holder keeps its fence")
		require.NoError(t, third.Release(e.ctx))
	})
}

// WithMaxHold caps the Lock it is given to, in this process: Resume takes
// it, counted from the Resume, and the original's cap is not carried. A
// resumed Lock capped at 600ms, extended to 300ms and kept alive ends
// with ErrMaxHold and ErrLost at its Deadline: the cap plus its ttl, or,
// when Redis keeps the hold for a minimum (1.5s), the minimum's end. Without
// WithMaxHold a resumed Lock is kept alive past the original's cap.
func TestResumeWithMaxHold(t *testing.T) {
	t.Parallel() // mostly waits, on servers of its own
	const maxHold, ttl, minHold = 600 * time.Millisecond, 300 * time.Millisecond, 1500 * time.Millisecond
	e := newReal(t, nil)
	tests := []struct {
		name string
		hold []padlock.Option
		ends time.Duration // after the Resume, at the earliest
	}{
		{"capped", []padlock.Option{padlock.WithMaxHold(maxHold / 2)}, maxHold},
		{"minimum", []padlock.Option{padlock.WithMinHold(minHold)}, minHold - 300*time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cs := moreClients(t, e, 2)
			key := "lock:" + t.Name()
			h, err := cs[0].TryAcquire(t.Context(), key, ttl, tt.hold...)
			require.NoError(t, err)
			resumed := time.Now()
			r, err := cs[1].Resume(t.Context(), key, h.Token(), padlock.WithMaxHold(maxHold))
			require.NoError(t, err)
			require.NoError(t, r.Extend(t.Context(), ttl), "renewed for 300ms from now on")
			kctx, stop := r.KeepAlive(t.Context())
			defer stop()
			lost := whenDone(kctx)
			waitDone(t, kctx, 5*time.Second)
			at := lost(t)
			cause := context.Cause(kctx)
			require.ErrorIs(t, cause, padlock.ErrMaxHold)
			require.ErrorIs(t, cause, padlock.ErrLost)
			assert.GreaterOrEqual(t, at.Sub(resumed), tt.ends, "not before the cap, nor before the minimum")
			assertLostByDeadline(t, at, r.Deadline())
			assert.False(t, at.Before(r.Deadline()), "at its Deadline")
			require.ErrorIs(t, r.Extend(t.Context(), ttl), padlock.ErrMaxHold)
		})
	}
	t.Run("uncapped", func(t *testing.T) {
		t.Parallel()
		cs := moreClients(t, e, 2)
		key := "lock:" + t.Name()
		h, err := cs[0].TryAcquire(t.Context(), key, ttl, padlock.WithMaxHold(maxHold/2))
		require.NoError(t, err)
		r, err := cs[1].Resume(t.Context(), key, h.Token())
		require.NoError(t, err)
		kctx, stop := r.KeepAlive(t.Context())
		defer stop()
		time.Sleep(maxHold + ttl)
		require.NoError(t, kctx.Err(), "the original's cap is its own")
		require.NoError(t, r.Extend(t.Context(), ttl))
		require.NoError(t, r.Release(t.Context()))
	})
}
