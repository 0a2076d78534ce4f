package padlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/faultproxy"
)

// proxied is a real redis-server behind a fault proxy: padlock's client
// goes through the proxy, e.raw straight to the server.
func proxied(t *testing.T, opts *redis.Options) (*env, *faultproxy.Proxy) {
	t.Helper()
	e := newReal(t, nil)
	p, err := faultproxy.Start(e.srv.Addr())
	require.NoError(t, err)
	t.Cleanup(p.Close)
	opts.Addr = p.Addr()
	_ = e.rdb.Close() // replaced by one through the proxy, closed by newEnv's cleanup
	e.rdb = redis.NewClient(opts)
	rdb := e.rdb
	e.c = padlock.New(rdb)
	t.Cleanup(func() { _ = e.c.Close() })
	// Load the scripts, so that the faults hit the calls under test.
	l, err := e.c.Acquire(e.ctx, e.key+":warm", time.Minute, padlock.WithFencing())
	require.NoError(t, err)
	require.NoError(t, l.Release(e.ctx))
	return e, p
}

// The reply to a successful acquire is lost and go-redis sends it again:
// the retry finds its own token, and the caller holds the lock instead of
// being locked out until the ttl runs down.
func TestLostAcquireReplyRetriedIntoTheLock(t *testing.T) {
	t.Parallel()
	e, p := proxied(t, &redis.Options{})
	for _, name := range []string{"TryAcquire", "Acquire"} {
		key := e.key + ":" + name
		p.DropNextReply()
		var l *padlock.Lock
		var err error
		if name == "TryAcquire" {
			l, err = e.c.TryAcquire(e.ctx, key, time.Minute, padlock.WithFencing())
		} else {
			l, err = e.c.Acquire(e.ctx, key, time.Minute, padlock.WithFencing())
		}
		require.NoError(t, err, "%s after a lost reply", name)
		assert.Equal(t, l.Token(), unspanned(e.get(key)), name)
		assert.Equal(t, int64(1), l.Fence(), "%s: the retry reports the first attempt's fence", name)
		assert.Equal(t, "1", e.get(fenceKey(key)), "%s: the counter moved once", name)
		require.NoError(t, l.Release(e.ctx))
	}
}

// The reply to a successful release is lost and go-redis sends it again:
// the retry finds the lock gone and Release reports ErrNotHeld (documented:
// the lock is not ours either way). It never touches a new owner's lock.
func TestLostReleaseReply(t *testing.T) {
	t.Parallel()
	e, p := proxied(t, &redis.Options{})
	l, err := e.c.TryAcquire(e.ctx, e.key, time.Minute)
	require.NoError(t, err)
	p.DropNextReply()
	err = l.Release(e.ctx)
	if err != nil {
		require.ErrorIs(t, err, padlock.ErrNotHeld)
	}
	assert.Empty(t, e.get(e.key), "released")

	next, err := e.c.TryAcquire(e.ctx, e.key, time.Minute)
	require.NoError(t, err)
	require.ErrorIs(t, l.Release(e.ctx), padlock.ErrNotHeld)
	assert.Equal(t, next.Token(), unspanned(e.get(e.key)), "the old holder's release left the new owner alone")
	require.NoError(t, next.Release(e.ctx))
}

// Redis stops answering (a blackhole: connections stay open) while a lock
// is kept alive: the lease ends with ErrLost no later than its local
// deadline, although every renewal hangs until go-redis's read timeout.
// (The release retried into a new owner's lock cannot delete it: the
// script compares the token; TestReleaseNeverTouchesAnotherHolder.)
func TestKeepAliveBlackholed(t *testing.T) {
	t.Parallel()
	e, p := proxied(t, &redis.Options{ReadTimeout: 2 * time.Second, MaxRetries: 1})
	const ttl = 600 * time.Millisecond
	l, err := e.c.TryAcquire(e.ctx, e.key, ttl)
	require.NoError(t, err)
	kctx, stop := l.KeepAlive(e.ctx)
	defer stop()
	lost := whenDone(kctx)

	time.Sleep(ttl / 2)
	p.SetBlackhole(true)
	waitDone(t, kctx, 10*time.Second)
	require.ErrorIs(t, context.Cause(kctx), padlock.ErrLost)
	assertLostByDeadline(t, lost(t), l.Deadline())
	p.SetBlackhole(false)
	p.CutAll()
}

// Latency as long as the ttl: a lock whose validity is gone by the time
// its reply arrives is released, not handed out.
func TestSlowAcquireIsNotHandedOut(t *testing.T) {
	t.Parallel()
	e, p := proxied(t, &redis.Options{})
	p.SetLatency(150 * time.Millisecond) // each way
	_, err := e.c.TryAcquire(e.ctx, e.key, 250*time.Millisecond)
	require.ErrorIs(t, err, padlock.ErrNotAcquired)
	assert.Contains(t, err.Error(), "released")
	assert.Empty(t, e.get(e.key), "the late lock was released")

	l, err := e.c.TryAcquire(e.ctx, e.key, 5*time.Second)
	require.NoError(t, err, "a ttl that outlasts the round trip")
	assert.True(t, l.Deadline().After(time.Now()))
	p.SetLatency(0)
	require.NoError(t, l.Release(e.ctx))
}

// Lost replies, for a place of a semaphore and a shared hold: an acquire
// whose reply is lost and that go-redis sends again finds its own place
// (with the fence it was given: the counter moved once); a release whose
// reply is lost and is sent again reports ErrNotHeld, and the place is
// free.
func TestCountedLostReplies(t *testing.T) {
	t.Parallel()
	e, p := proxied(t, &redis.Options{})
	for _, tt := range []struct {
		name string
		opt  padlock.Option
	}{{"semaphore", padlock.WithLimit(2)}, {"shared", padlock.WithShared()}} {
		for _, call := range []string{"TryAcquire", "Acquire"} {
			key := e.key + ":" + tt.name + ":" + call
			p.DropNextReply()
			var l *padlock.Lock
			var err error
			if call == "TryAcquire" {
				l, err = e.c.TryAcquire(e.ctx, key, time.Minute, tt.opt, padlock.WithFencing())
			} else {
				l, err = e.c.Acquire(e.ctx, key, time.Minute, tt.opt, padlock.WithFencing())
			}
			require.NoError(t, err, "%s %s after a lost reply", tt.name, call)
			info, err := e.c.Inspect(e.ctx, key)
			require.NoError(t, err)
			require.Len(t, info.Holders, 1, "%s %s: one place taken", tt.name, call)
			assert.Equal(t, l.Token(), info.Holders[0].Token)
			assert.Equal(t, int64(1), l.Fence(), "%s %s: the retry reports the first attempt's fence", tt.name, call)
			assert.Equal(t, "1", e.get(fenceKey(key)), "%s %s: the counter moved once", tt.name, call)

			p.DropNextReply()
			if err := l.Release(e.ctx); err != nil { // nil when the lost reply was a NOSCRIPT
				require.ErrorIs(t, err, padlock.ErrNotHeld, "%s: a retried release finds it gone", tt.name)
			}
			info, err = e.c.Inspect(e.ctx, key)
			require.NoError(t, err)
			assert.Empty(t, info.Holders, "%s: released", tt.name)
			assert.False(t, info.Held)
		}
	}
}
