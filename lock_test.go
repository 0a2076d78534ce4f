package padlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/redistest"
)

func TestTryAcquire(t *testing.T) {
	both(t, func(t *testing.T, e *env) {
		l, err := e.c.TryAcquire(e.ctx, e.key, 10*time.Second)
		require.NoError(t, err)
		assert.Equal(t, e.key, l.Key())
		assert.Equal(t, l.Token(), unspanned(e.get(e.key)), "the key holds the token, verbatim")
		if d := e.pttl(e.key); d <= 0 || d > 10*time.Second {
			t.Errorf("PTTL = %v, want in (0, 10s]", d)
		}
		assert.Zero(t, l.Fence(), "no fence without WithFencing")
		assert.Empty(t, l.Metadata())

		_, err = e.c.TryAcquire(e.ctx, e.key, 10*time.Second)
		require.ErrorIs(t, err, padlock.ErrNotAcquired)
		assert.Equal(t, l.Token(), unspanned(e.get(e.key)), "a failed attempt changes nothing")

		require.NoError(t, l.Release(e.ctx))
		assert.Empty(t, e.get(e.key))
		l2, err := e.c.TryAcquire(e.ctx, e.key, time.Second)
		require.NoError(t, err, "free again after Release")
		require.NoError(t, l2.Release(e.ctx))
	})
}

func TestTokensAreRandomUUIDv4(t *testing.T) {
	t.Parallel()
	e := newMini(t)
	seen := map[string]bool{}
	for i := range 100 {
		l, err := e.c.TryAcquire(e.ctx, fmt.Sprintf("%s:%d", e.key, i), time.Second)
		require.NoError(t, err)
		id, err := uuid.Parse(l.Token())
		require.NoError(t, err)
		assert.Equal(t, uuid.Version(4), id.Version())
		assert.Equal(t, uuid.RFC4122, id.Variant())
		assert.False(t, seen[l.Token()], "token repeated")
		seen[l.Token()] = true
	}
}

// A retried acquire (the first reply lost, the command sent again) must
// find its own token and succeed with the same fence, not lock its caller
// out until the ttl runs down.
func TestAcquireRetrySeesItsOwnToken(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		e.rdb.AddHook(&replay{})
		l, err := e.c.TryAcquire(e.ctx, e.key, 10*time.Second, padlock.WithFencing())
		require.NoError(t, err, "the replayed attempt must succeed")
		assert.Equal(t, int64(1), l.Fence(), "the retry reports the first attempt's fence")
		assert.Equal(t, "1", e.get(fenceKey(e.key)), "the counter moved once")
		assert.Equal(t, l.Token(), unspanned(e.get(e.key)))
		require.NoError(t, l.Release(e.ctx))
	})
}

func (r *replay) first() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := !r.done
	r.done = true
	return first
}

var errLostReply = errors.New("test: reply lost")

// An acquire whose reply is lost reports the error, and does not leave the
// lock held by nobody who knows it.
func TestTryAcquireLostReplyLeavesNothingHeld(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		e.rdb.AddHook(&lostReply{})
		_, err := e.c.TryAcquire(e.ctx, e.key, time.Minute)
		require.ErrorIs(t, err, errLostReply)
		assert.NotErrorIs(t, err, padlock.ErrNotAcquired)
		assert.Empty(t, e.get(e.key), "the lock taken by the lost attempt was released")
	})
}

func TestReleaseNeverTouchesAnotherHolder(t *testing.T) {
	both(t, func(t *testing.T, e *env) {
		l, err := e.c.TryAcquire(e.ctx, e.key, time.Minute)
		require.NoError(t, err)
		// The lock expires and someone else takes the key.
		require.NoError(t, e.raw.Set(e.ctx, e.key, "someone-else", time.Minute).Err())

		require.ErrorIs(t, l.Release(e.ctx), padlock.ErrNotHeld)
		assert.Equal(t, "someone-else", e.get(e.key))
		require.ErrorIs(t, l.Extend(e.ctx, time.Hour), padlock.ErrNotHeld)
		if d := e.pttl(e.key); d > time.Minute {
			t.Errorf("Extend changed another holder's expiry: PTTL %v", d)
		}
		_, err = l.TTL(e.ctx)
		require.ErrorIs(t, err, padlock.ErrNotHeld)
	})
}

func TestReleaseTwice(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		l, err := e.c.TryAcquire(e.ctx, e.key, time.Minute)
		require.NoError(t, err)
		require.NoError(t, l.Release(e.ctx))
		err = l.Release(e.ctx)
		require.ErrorIs(t, err, padlock.ErrNotHeld)
		assert.NotErrorIs(t, err, padlock.ErrInvalid)
		require.ErrorIs(t, l.Extend(e.ctx, time.Minute), padlock.ErrNotHeld)
		_, err = l.TTL(e.ctx)
		require.ErrorIs(t, err, padlock.ErrNotHeld)
		assert.Empty(t, e.get(e.key), "nothing brought the lock back")
	})
}

func TestExtendNeverRevivesAnExpiredLock(t *testing.T) {
	t.Parallel()
	e := newMini(t)
	l, err := e.c.TryAcquire(e.ctx, e.key, time.Second)
	require.NoError(t, err)
	e.mr.FastForward(2 * time.Second)

	require.ErrorIs(t, l.Extend(e.ctx, time.Minute), padlock.ErrNotHeld)
	assert.False(t, e.mr.Exists(e.key), "Extend re-created the key")
	require.ErrorIs(t, l.Release(e.ctx), padlock.ErrNotHeld)
}

func TestExtendAndTTL(t *testing.T) {
	both(t, func(t *testing.T, e *env) {
		l, err := e.c.TryAcquire(e.ctx, e.key, time.Second)
		require.NoError(t, err)
		before := l.Deadline()

		require.NoError(t, l.Extend(e.ctx, time.Hour))
		d, err := l.TTL(e.ctx)
		require.NoError(t, err)
		if d <= 59*time.Minute || d > time.Hour {
			t.Errorf("TTL after Extend(1h) = %v", d)
		}
		assert.InDelta(t, e.pttl(e.key), d, float64(time.Second), "TTL reports Redis's PTTL")
		assert.True(t, l.Deadline().After(before.Add(58*time.Minute)), "Extend moved the local deadline")
		require.NoError(t, l.Release(e.ctx))
	})
}

func TestExpiryOnMiniredis(t *testing.T) {
	t.Parallel()
	e := newMini(t)
	l, err := e.c.TryAcquire(e.ctx, e.key, 10*time.Second)
	require.NoError(t, err)
	e.mr.FastForward(9 * time.Second)
	_, err = e.c.TryAcquire(e.ctx, e.key, time.Second)
	require.ErrorIs(t, err, padlock.ErrNotAcquired, "still held before the ttl runs out")
	e.mr.FastForward(2 * time.Second)
	l2, err := e.c.TryAcquire(e.ctx, e.key, time.Second)
	require.NoError(t, err, "free once the ttl ran out")
	require.ErrorIs(t, l.Release(e.ctx), padlock.ErrNotHeld)
	assert.Equal(t, l2.Token(), unspanned(e.get(e.key)), "the old holder's Release left the new lock alone")
}

func TestExpiryInRealTime(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	l, err := e.c.TryAcquire(e.ctx, e.key, 100*time.Millisecond)
	require.NoError(t, err)
	_, err = e.c.TryAcquire(e.ctx, e.key, time.Second)
	require.ErrorIs(t, err, padlock.ErrNotAcquired)

	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	l2, err := e.c.Acquire(ctx, e.key, time.Second)
	require.NoError(t, err, "the lock expires by itself")
	assert.False(t, time.Now().Before(l.Deadline()), "no one got the lock before the first holder's local deadline")
	require.ErrorIs(t, l.Release(e.ctx), padlock.ErrNotHeld)
	require.NoError(t, l2.Release(e.ctx))
}

func TestFencing(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		var last int64
		next := func(opts ...padlock.Option) *padlock.Lock {
			t.Helper()
			l, err := e.c.TryAcquire(e.ctx, e.key, time.Second, append(opts, padlock.WithFencing())...) // room for a loaded run's Release
			require.NoError(t, err)
			if l.Fence() <= last {
				t.Fatalf("fence %d after %d: not strictly increasing", l.Fence(), last)
			}
			last = l.Fence()
			return l
		}
		// Across releases...
		for range 3 {
			require.NoError(t, next().Release(e.ctx))
		}
		// ...deletions of the lock key...
		next()
		require.NoError(t, e.raw.Del(e.ctx, e.key).Err())
		// ...and expiries.
		next()
		if e.mr != nil {
			e.mr.FastForward(2 * time.Second)
		} else {
			require.Eventually(t, func() bool { return e.get(e.key) == "" }, 5*time.Second, 10*time.Millisecond)
		}
		l := next()
		assert.Equal(t, int64(6), l.Fence())
		assert.Equal(t, "6", e.get(fenceKey(e.key)))
		assert.Equal(t, time.Duration(-1), e.pttl(fenceKey(e.key)), "the counter never expires")
		require.NoError(t, l.Release(e.ctx))

		// A lock without fencing leaves the counter alone and reports 0.
		l, err := e.c.TryAcquire(e.ctx, e.key, time.Second)
		require.NoError(t, err)
		assert.Zero(t, l.Fence())
		assert.Equal(t, "6", e.get(fenceKey(e.key)))
		require.NoError(t, l.Release(e.ctx))
	})
}

func TestFenceKeyNames(t *testing.T) {
	t.Parallel()
	e := newMini(t, padlock.WithFencing())
	tests := []struct {
		key, fenceKey string
	}{
		{"lock:a", "lock:a:{lock:a}:fence"},
		{"lock:{order}:42", "lock:{order}:42:fence"},
		{"{user1}", "{user1}:fence"},
		{"x{y}z{w}", "x{y}z{w}:fence"},
	}
	for _, tt := range tests {
		l, err := e.c.TryAcquire(e.ctx, tt.key, time.Second)
		require.NoError(t, err, tt.key)
		assert.Equal(t, "1", e.get(tt.fenceKey), tt.key)
		require.NoError(t, l.Release(e.ctx))
	}
	// A brace without a hash tag: the key hashes whole, and no key that
	// begins with it can carry a hash tag equal to it.
	for _, key := range []string{"a}b", "a{}b", "}x{", "a{b"} {
		_, err := e.c.TryAcquire(e.ctx, key, time.Second)
		require.ErrorIs(t, err, padlock.ErrInvalid, key)
		assert.False(t, e.mr.Exists(key), key)
		l, err := e.c.TryAcquire(e.ctx, key, time.Second, padlock.WithoutFencing())
		require.NoError(t, err, "%s can be locked without fencing", key)
		require.NoError(t, l.Release(e.ctx))
	}
}

// On a cluster the fence counter must share the lock key's slot, or the
// acquire script fails with CROSSSLOT.
func TestFenceKeyStaysInTheKeysSlot(t *testing.T) {
	longOnly(t)
	t.Parallel() // starts servers of its own; mostly waits
	srv := redistest.StartCluster(t)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr()}})
	t.Cleanup(func() { _ = cc.Close() })
	ctx := t.Context()
	c := padlock.New(cc, padlock.WithFencing())
	for _, key := range []string{"lock:a", "lock:{order}:42", "{user1}", "x{y}z{w}"} {
		l, err := c.TryAcquire(ctx, key, time.Second)
		require.NoError(t, err, key)
		fk := fenceKey(key)
		if strings.Contains(key, "}") {
			fk = key + ":fence"
		}
		assert.Equal(t, cc.ClusterKeySlot(ctx, key).Val(), cc.ClusterKeySlot(ctx, fk).Val(), key)
		assert.Equal(t, int64(1), l.Fence(), key)
		require.NoError(t, l.Release(ctx))
	}
}

func TestMetadata(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		l, err := e.c.TryAcquire(e.ctx, e.key, time.Minute, padlock.WithMetadata("web-1 pid=42"))
		require.NoError(t, err)
		assert.Equal(t, "web-1 pid=42", l.Metadata())
		assert.Equal(t, l.Token()+" ~60000 web-1 pid=42", e.get(e.key), "an operator sees the holder with GET: its token, span and metadata")
		require.NoError(t, l.Extend(e.ctx, time.Minute))
		_, err = l.TTL(e.ctx)
		require.NoError(t, err)
		require.NoError(t, l.Release(e.ctx))
		assert.Empty(t, e.get(e.key))
	})
}

func TestClientDefaultsAndPerCallOverrides(t *testing.T) {
	t.Parallel()
	e := newMini(t, padlock.WithFencing(), padlock.WithMetadata("default"))
	l, err := e.c.TryAcquire(e.ctx, e.key, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, int64(1), l.Fence())
	assert.Equal(t, "default", l.Metadata())
	require.NoError(t, l.Release(e.ctx))

	l, err = e.c.TryAcquire(e.ctx, e.key, time.Minute, padlock.WithoutFencing(), padlock.WithMetadata("mine"))
	require.NoError(t, err)
	assert.Zero(t, l.Fence())
	assert.Equal(t, "mine", l.Metadata())
	require.NoError(t, l.Release(e.ctx))
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	e := newMini(t)
	var typedNil *redis.Client
	ctx := e.ctx
	var nilCtx context.Context
	tests := []struct {
		name string
		call func() error
	}{
		{"empty key", func() error { _, err := e.c.TryAcquire(ctx, "", time.Second); return err }},
		{"zero ttl", func() error { _, err := e.c.TryAcquire(ctx, e.key, 0); return err }},
		{"negative ttl", func() error { _, err := e.c.Acquire(ctx, e.key, -time.Second); return err }},
		{"ttl under 1ms", func() error { _, err := e.c.TryAcquire(ctx, e.key, 999*time.Microsecond); return err }},
		{"nil client", func() error { _, err := padlock.New(nil).TryAcquire(ctx, e.key, time.Second); return err }},
		{"typed nil client", func() error { _, err := padlock.New(typedNil).Acquire(ctx, e.key, time.Second); return err }},
		{"nil *Client", func() error { var c *padlock.Client; _, err := c.TryAcquire(ctx, e.key, time.Second); return err }},
		{"nil context", func() error { _, err := e.c.TryAcquire(nilCtx, e.key, time.Second); return err }},
		{"nil context Acquire", func() error { _, err := e.c.Acquire(nilCtx, e.key, time.Second); return err }},
		{"nil fn TryDo", func() error { return e.c.TryDo(ctx, e.key, time.Second, nil) }},
		{"nil fn Do", func() error { return e.c.Do(ctx, e.key, time.Second, nil) }},
		{"empty key Do", func() error { return e.c.Do(ctx, "", time.Second, func(context.Context) error { return nil }) }},
		{"zero Lock Release", func() error { var l padlock.Lock; return l.Release(ctx) }},
		{"nil Lock Release", func() error { var l *padlock.Lock; return l.Release(ctx) }},
		{"nil Lock Extend", func() error { var l *padlock.Lock; return l.Extend(ctx, time.Second) }},
		{"zero Lock TTL", func() error { var l padlock.Lock; _, err := l.TTL(ctx); return err }},
		{"zero Lock KeepAlive", func() error {
			var l padlock.Lock
			kctx, stop := l.KeepAlive(ctx)
			defer stop()
			return context.Cause(kctx)
		}},
		{"nil ctx KeepAlive", func() error {
			l, err := e.c.TryAcquire(ctx, e.key+":ka", time.Second)
			require.NoError(t, err)
			defer l.Release(ctx)
			kctx, stop := l.KeepAlive(nilCtx)
			defer stop()
			return context.Cause(kctx)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			require.NotPanics(t, func() { err = tt.call() })
			require.ErrorIs(t, err, padlock.ErrInvalid)
			assert.NotErrorIs(t, err, padlock.ErrNotAcquired)
			assert.NotErrorIs(t, err, padlock.ErrNotHeld)
			assert.True(t, strings.HasPrefix(err.Error(), "padlock: invalid argument: "), err.Error())
			assert.False(t, e.mr.Exists(e.key), "bad input changed Redis")
		})
	}
	// Methods with no error of their own do not panic either.
	var l *padlock.Lock
	assert.Empty(t, l.Key())
	assert.Empty(t, l.Token())
	assert.Zero(t, l.Fence())
	assert.True(t, l.Deadline().IsZero())
}

func TestTTLRoundsUpToWholeMilliseconds(t *testing.T) {
	both(t, func(t *testing.T, e *env) {
		l, err := e.c.TryAcquire(e.ctx, e.key, 10*time.Second+1)
		require.NoError(t, err)
		d := e.pttl(e.key)
		if d <= 9*time.Second || d > 10*time.Second+time.Millisecond {
			t.Errorf("PTTL = %v, want about 10.001s", d)
		}
		require.NoError(t, l.Release(e.ctx))
	})
}

func TestRedisDownIsNotErrNotAcquired(t *testing.T) {
	t.Parallel() // starts servers of its own; mostly waits
	e := newReal(t, nil)
	e.srv.Stop()
	_, err := e.c.TryAcquire(e.ctx, e.key, time.Second)
	require.Error(t, err)
	assert.NotErrorIs(t, err, padlock.ErrNotAcquired)
	assert.NotErrorIs(t, err, padlock.ErrInvalid)
	assert.Contains(t, err.Error(), "padlock: acquire")

	ctx, cancel := context.WithTimeout(e.ctx, 2*time.Second)
	defer cancel()
	_, err = e.c.Acquire(ctx, e.key, time.Second)
	require.Error(t, err)
	assert.NotErrorIs(t, err, padlock.ErrNotAcquired, "an outage is reported as such, not as contention")
	require.NoError(t, ctx.Err(), "Acquire returned before its deadline")
}

// With Redis down and a deadline shorter than go-redis's own dial retries,
// Acquire returns close to its deadline, with an error that is not
// ErrNotAcquired.
func TestAcquireReturnsByItsDeadlineWhenRedisIsDown(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	e.srv.Stop()
	for _, wait := range []time.Duration{50 * time.Millisecond, 300 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(e.ctx, wait)
		start := time.Now()
		_, err := e.c.Acquire(ctx, e.key, time.Second)
		took := time.Since(start)
		cancel()
		require.Error(t, err)
		assert.NotErrorIs(t, err, padlock.ErrNotAcquired)
		// go-redis alone spends about 1.7s on a refused connection; the
		// slack is for a loaded machine and the bounded clean-up.
		if took > wait+500*time.Millisecond {
			t.Errorf("Acquire with a %v deadline returned after %v", wait, took)
		}
	}
}

// TryAcquire and Release cost one round trip each once the scripts are
// loaded; Extend and TTL one each.
func TestRoundTrips(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		warm, err := e.c.TryAcquire(e.ctx, e.key+":warm", time.Minute, padlock.WithFencing())
		require.NoError(t, err)
		require.NoError(t, warm.Extend(e.ctx, time.Minute))
		_, err = warm.TTL(e.ctx)
		require.NoError(t, err)
		require.NoError(t, warm.Release(e.ctx))

		for _, opts := range [][]padlock.Option{nil, {padlock.WithFencing()}} {
			e.n.reset()
			l, err := e.c.TryAcquire(e.ctx, e.key, time.Minute, opts...)
			require.NoError(t, err)
			require.NoError(t, l.Release(e.ctx))
			trips, cmds := e.n.reset()
			assert.Equal(t, 2, trips, "TryAcquire+Release: %v", cmds)
			assert.Equal(t, []string{"evalsha", "evalsha"}, cmds)
		}

		l, err := e.c.TryAcquire(e.ctx, e.key, time.Minute)
		require.NoError(t, err)
		e.n.reset()
		require.NoError(t, l.Extend(e.ctx, time.Minute))
		trips, _ := e.n.reset()
		assert.Equal(t, 1, trips, "Extend")
		_, err = l.TTL(e.ctx)
		require.NoError(t, err)
		trips, _ = e.n.reset()
		assert.Equal(t, 1, trips, "TTL")
		_, err = e.c.TryAcquire(e.ctx, e.key, time.Minute)
		require.ErrorIs(t, err, padlock.ErrNotAcquired)
		trips, _ = e.n.reset()
		assert.Equal(t, 1, trips, "a failed TryAcquire")
		require.NoError(t, l.Release(e.ctx))
	})
}

// After SCRIPT FLUSH (or on a new server) EVALSHA fails with NOSCRIPT; the
// call falls back to EVAL without the caller seeing it.
func TestScriptFlushIsTransparent(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		l, err := e.c.TryAcquire(e.ctx, e.key, time.Minute)
		require.NoError(t, err)
		require.NoError(t, e.raw.ScriptFlush(e.ctx).Err())
		require.NoError(t, l.Extend(e.ctx, time.Minute))
		require.NoError(t, e.raw.ScriptFlush(e.ctx).Err())
		require.NoError(t, l.Release(e.ctx))
	})
}

func TestNewStartsNoGoroutine(t *testing.T) {
	e := newMini(t)
	require.NoError(t, e.rdb.Ping(e.ctx).Err()) // the client's connection, and miniredis's side of it
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := padlock.New(e.rdb, padlock.WithFencing())
	l, err := c.TryAcquire(e.ctx, e.key, time.Minute)
	require.NoError(t, err)
	require.NoError(t, l.Release(e.ctx))
}

// Each supported go-redis client type works: a Cluster client routes the
// scripts by key (the fence key shares the lock key's slot).
func TestClientTypes(t *testing.T) {
	t.Parallel() // starts servers of its own; mostly waits
	srv := newReal(t, nil).srv
	cluster := redistest.StartCluster(t)
	sentinel := redistest.StartSentinel(t, srv, "padlock")
	failover := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "padlock", SentinelAddrs: []string{sentinel.Addr()}})
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{cluster.Addr()}})
	t.Cleanup(func() {
		_ = cc.Close()
		_ = failover.Close()
	})
	tests := []struct {
		name string
		rdb  redis.UniversalClient
	}{
		{"Client", srv.Client()},
		{"ClusterClient", cc},
		{"FailoverClient", failover},
		{"UniversalClient", redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{srv.Addr()}})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := patientCtx(t)
			c := padlock.New(tt.rdb, padlock.WithFencing())
			key := "lock:{types}:" + tt.name
			for _, k := range []string{key, "lock:types:" + tt.name} {
				l, err := c.TryAcquire(ctx, k, time.Minute)
				require.NoError(t, err)
				assert.Positive(t, l.Fence())
				_, err = c.TryAcquire(ctx, k, time.Minute)
				require.ErrorIs(t, err, padlock.ErrNotAcquired)
				require.NoError(t, l.Extend(ctx, time.Minute))
				kctx, stop := l.KeepAlive(ctx)
				require.NoError(t, kctx.Err())
				stop()
				require.NoError(t, l.Release(ctx))
				require.NoError(t, c.Do(ctx, k, time.Second, func(context.Context) error { return nil }))
			}
		})
	}
	_ = tests[3].rdb.Close()
}

// A *redis.Ring is refused: it moves keys between shards, so a lock could
// be held twice. Every call fails with ErrUnsupported, saying what to use
// instead, and writes nothing to any shard; so does a Redlock with a Ring
// among its nodes.
func TestRingIsRefused(t *testing.T) {
	t.Parallel()
	a, b := redistest.Start(t), redistest.Start(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr(), "b": b.Addr()}})
	t.Cleanup(func() { _ = ring.Close() })
	ctx := t.Context()
	for _, c := range []*padlock.Client{padlock.New(ring), padlock.NewRedlock([]redis.UniversalClient{a.Client(), ring, b.Client()})} {
		defer c.Close()
		noop := func(context.Context) error { return nil }
		calls := map[string]func() error{
			"TryAcquire":     func() error { _, err := c.TryAcquire(ctx, "ring:3", time.Minute); return err },
			"Acquire":        func() error { _, err := c.Acquire(ctx, "ring:3", time.Minute, padlock.WithFencing()); return err },
			"TryAcquireMany": func() error { _, err := c.TryAcquireMany(ctx, []string{"ring:0", "ring:3"}, time.Minute); return err },
			"AcquireMany":    func() error { _, err := c.AcquireMany(ctx, []string{"ring:0", "ring:3"}, time.Minute); return err },
			"TryDo":          func() error { return c.TryDo(ctx, "ring:3", time.Minute, noop) },
			"Do":             func() error { return c.Do(ctx, "ring:3", time.Minute, noop, padlock.WithLimit(2)) },
			"Inspect":        func() error { _, err := c.Inspect(ctx, "ring:3"); return err },
			"Check":          func() error { _, err := c.Check(ctx, "ring:3"); return err },
		}
		for name, call := range calls {
			err := call()
			require.ErrorIs(t, err, padlock.ErrUnsupported, name)
			assert.Contains(t, err.Error(), "Ring", name)
			assert.Contains(t, err.Error(), "NewRedlock", name)
		}
	}
	for _, s := range []*redistest.Server{a, b} {
		assert.Zero(t, s.Client().DBSize(ctx).Val(), "nothing written to %s", s.Addr())
	}
}

// A concurrency smoke test for one Lock shared by several goroutines; run
// with -race.
func TestLockIsSafeForConcurrentUse(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		l, err := e.c.TryAcquire(e.ctx, e.key, time.Minute, padlock.WithFencing())
		require.NoError(t, err)
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for range 8 {
			wg.Go(func() {
				kctx, stop := l.KeepAlive(e.ctx)
				defer stop()
				for range 5 {
					if err := l.Extend(e.ctx, time.Minute); err != nil {
						errs <- err
					}
					if _, err := l.TTL(e.ctx); err != nil {
						errs <- err
					}
					_ = l.Fence()
					_ = l.Deadline()
				}
				if kctx.Err() != nil {
					errs <- context.Cause(kctx)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		var released, notHeld int
		var mu sync.Mutex
		for range 4 {
			wg.Go(func() {
				err := l.Release(e.ctx)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					released++
				case errors.Is(err, padlock.ErrNotHeld):
					notHeld++
				default:
					t.Error(err)
				}
			})
		}
		wg.Wait()
		assert.Equal(t, 1, released)
		assert.Equal(t, 3, notHeld)
	})
}
