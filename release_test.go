package padlock_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/redistest"
)

// ctxMark is a context value that Release must pass on to Redis calls.
type ctxMark struct{}

// markSeen is a go-redis hook that records whether the commands it sees
// carry ctxMark in their context, and whether that context was done.
type markSeen struct {
	passHook    // dials and pipelines pass through
	mu          sync.Mutex
	marked, all int
	done        int
}

func (m *markSeen) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		m.mu.Lock()
		m.all++
		if ctx.Value(ctxMark{}) != nil {
			m.marked++
		}
		if ctx.Err() != nil {
			m.done++
		}
		m.mu.Unlock()
		return next(ctx, cmd)
	}
}

// `defer lock.Release(reqCtx)` with a request context that is over by then
// still releases the lock, at once, and the next waiter (in another
// Client) gets it at once rather than after the ttl.
func TestReleaseWithAnEndedContext(t *testing.T) {
	srv := redistest.Start(t)
	tests := []struct {
		name string
		end  func(ctx context.Context) (context.Context, func())
	}{
		{"cancelled", func(ctx context.Context) (context.Context, func()) {
			ctx, cancel := context.WithCancel(ctx)
			return ctx, cancel
		}},
		{"deadline passed", func(ctx context.Context) (context.Context, func()) {
			ctx, cancel := context.WithDeadline(ctx, time.Now().Add(100*time.Millisecond))
			return ctx, func() { time.Sleep(150 * time.Millisecond); cancel() }
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := "lock:" + t.Name()
			rdb := srv.Client()
			seen := &markSeen{}
			rdb.AddHook(seen)
			a, b := padlock.New(rdb), padlock.New(srv.Client())
			defer a.Close()
			defer b.Close()
			warm, err := a.TryAcquire(t.Context(), key+":warm", time.Second) // load the scripts
			require.NoError(t, err)
			require.NoError(t, warm.Release(t.Context()))

			reqCtx, end := tt.end(context.WithValue(t.Context(), ctxMark{}, "request"))
			lock, err := a.Acquire(reqCtx, key, 30*time.Second)
			require.NoError(t, err)

			// Another instance waits; only the release can wake it in time.
			slow := padlock.WithBackoff(padlock.ExponentialBackoff(time.Minute, time.Minute))
			got := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
				defer cancel()
				l, err := b.Acquire(ctx, key, 30*time.Second, slow)
				if err == nil {
					err = l.Release(ctx)
				}
				got <- err
			}()
			require.Eventually(t, func() bool { return srv.Client().Exists(t.Context(), queueKey(key)).Val() == 1 },
				5*time.Second, 5*time.Millisecond, "the other instance waits")
			time.Sleep(100 * time.Millisecond) // and is subscribed

			end()
			require.Error(t, reqCtx.Err())
			seen.mu.Lock()
			seen.all, seen.marked, seen.done = 0, 0, 0
			seen.mu.Unlock()
			released := time.Now()
			require.NoError(t, lock.Release(reqCtx), "Release with an ended context")
			assert.NotEqual(t, lock.Token(), srv.Client().Get(t.Context(), key).Val(), "no longer ours in Redis")
			select {
			case err := <-got:
				require.NoError(t, err)
				assert.Less(t, time.Since(released), 5*time.Second, "the waiter got it at once, not after the 30s ttl")
			case <-time.After(10 * time.Second):
				t.Fatal("the waiter did not get the lock after the release")
			}
			seen.mu.Lock()
			defer seen.mu.Unlock()
			assert.Equal(t, 1, seen.all, "one round trip")
			assert.Equal(t, 1, seen.marked, "the release kept the context's values")
			assert.Zero(t, seen.done, "the release ran on a live context")
			require.ErrorIs(t, lock.Release(reqCtx), padlock.ErrNotHeld, "a second Release")
		})
	}
}

// After the lock's local deadline there is nothing to release: Release
// returns ErrNotHeld at once and sends nothing.
func TestReleaseAfterTheLocalDeadline(t *testing.T) {
	e := newReal(t, nil)
	l, err := e.c.TryAcquire(e.ctx, e.key, 50*time.Millisecond)
	require.NoError(t, err)
	time.Sleep(time.Until(l.Deadline()) + time.Millisecond)
	e.n.reset()
	require.ErrorIs(t, l.Release(e.ctx), padlock.ErrNotHeld)
	trips, _ := e.n.reset()
	assert.Zero(t, trips, "nothing sent")
}

// A Release that meets a stopped server returns its error, and the Client
// sends it again in the background: once the server is back (restarted
// from its append-only file, with the lock still in it), the lock is
// deleted within a few seconds, with no call from the user, long before
// its 30s ttl.
func TestFailedReleaseIsRetriedInTheBackground(t *testing.T) {
	srv := redistest.Start(t, redistest.WithAOF())
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer rdb.Close()
	c := padlock.New(rdb)
	defer c.Close()
	ctx := t.Context()
	key := "lock:" + t.Name()
	l, err := c.TryAcquire(ctx, key, 30*time.Second)
	require.NoError(t, err)

	srv.Stop()
	require.True(t, aofHolds(t, srv.Dir(), l.Token()), "the lock is in the append-only file: a restart brings it back")
	err = l.Release(ctx)
	require.Error(t, err, "Redis is down")
	require.NotErrorIs(t, err, padlock.ErrNotHeld)
	time.Sleep(500 * time.Millisecond) // retries meet the stopped server too
	srv.Restart()
	back := time.Now()
	admin := srv.Client()
	// (The retry may land before this test's own first look.)
	require.Eventually(t, func() bool { return admin.Exists(ctx, key).Val() == 0 }, 5*time.Second, 10*time.Millisecond,
		"the pending release deleted the lock")
	t.Logf("deleted %v after the server came back", time.Since(back).Round(time.Millisecond))
	require.ErrorIs(t, l.Release(ctx), padlock.ErrNotHeld, "released by the retry")
}

// aofHolds reports whether an append-only file under dir (Redis 7 keeps
// them in appendonlydir/) contains s.
func aofHolds(t *testing.T, dir, s string) bool {
	t.Helper()
	found := false
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.Contains(d.Name(), ".aof") {
			return err
		}
		b, err := os.ReadFile(path)
		found = found || strings.Contains(string(b), s)
		return err
	})
	require.NoError(t, err)
	return found
}

// A pending retry compares the token like any release: it never deletes a
// lock that another holder (another Client, or the same Client through a
// new Acquire) took meanwhile.
func TestReleaseRetryNeverDeletesAnotherHolder(t *testing.T) {
	t.Parallel()
	e, p := proxied(t, &redis.Options{MaxRetries: -1, ReadTimeout: 200 * time.Millisecond, DialTimeout: 200 * time.Millisecond})
	releases := &releaseCounter{}
	e.rdb.AddHook(releases)
	other := padlock.New(e.raw) // another instance, straight to the server

	for _, who := range []string{"another client", "the same client"} {
		key := e.key + ":" + who
		l, err := e.c.TryAcquire(e.ctx, key, 30*time.Second)
		require.NoError(t, err)

		p.SetBlackhole(true)
		require.Error(t, l.Release(e.ctx), "the release cannot reach Redis")
		// The lock goes (it expired, say) and a new holder takes it.
		require.NoError(t, e.raw.Del(e.ctx, key).Err())
		var next *padlock.Lock
		if who == "another client" {
			next, err = other.TryAcquire(e.ctx, key, 30*time.Second)
			require.NoError(t, err)
		} else {
			time.Sleep(1500 * time.Millisecond) // the retries back off to about a second apart
		}
		before := releases.landed()
		p.SetBlackhole(false)
		p.CutAll()
		if next == nil {
			next, err = e.c.TryAcquire(e.ctx, key, 30*time.Second)
			require.NoError(t, err)
			t.Logf("%s: %d retries landed before the new acquire", who, releases.landed()-before)
		}
		require.Eventually(t, func() bool { return releases.landed() > before }, 5*time.Second, 10*time.Millisecond,
			"the pending release landed")
		time.Sleep(100 * time.Millisecond)
		assert.Equal(t, next.Token(), e.get(key), "%s: the new holder's lock is untouched", who)
		require.ErrorIs(t, l.Release(e.ctx), padlock.ErrNotHeld)
		require.NoError(t, next.Release(e.ctx))
	}
}

// releaseCounter counts release scripts that Redis answered.
type releaseCounter struct {
	passHook // dials and pipelines pass through
	mu       sync.Mutex
	n        int
}

func (r *releaseCounter) landed() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

func (r *releaseCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if args := cmd.Args(); len(args) > 1 && args[1] == padlock.ReleaseScriptSHA() && err == nil {
			r.mu.Lock()
			r.n++
			r.mu.Unlock()
		}
		return err
	}
}

// Pending releases cost no goroutine each; Close abandons them and leaves
// no goroutine behind.
func TestPendingReleasesShareOneGoroutine(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer rdb.Close()
	c := padlock.New(rdb)
	ctx := t.Context()
	const n = 50
	locks := make([]*padlock.Lock, n)
	for i := range locks {
		l, err := c.TryAcquire(ctx, "lock:pending:"+string(rune('a'+i%26))+string(rune('a'+i/26)), 30*time.Second)
		require.NoError(t, err)
		locks[i] = l
	}
	srv.Stop()
	before := padlockGoroutines()
	for _, l := range locks {
		err := l.Release(ctx)
		require.Error(t, err)
		require.False(t, errors.Is(err, padlock.ErrNotHeld))
	}
	time.Sleep(300 * time.Millisecond) // retries under way
	assert.LessOrEqual(t, padlockGoroutines()-before, 3, "goroutines for %d pending releases", n)
	require.NoError(t, c.Close())
}

// A pending release retry ends when its go-redis client is closed (no
// retry can land through it), so the Client's goroutine exits without a
// Close.
func TestPendingReleaseEndsWithItsRedisClient(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	c := padlock.New(rdb)
	l, err := c.TryAcquire(t.Context(), "lock:"+t.Name(), time.Minute)
	require.NoError(t, err)
	srv.Stop()
	require.Error(t, l.Release(t.Context()))
	require.NoError(t, rdb.Close())
	// goleak waits for the scheduler's goroutine: its next retry (within
	// a second) finds the client closed and gives up.
}

// Extend and TTL still honour their context (the caller asked a question:
// an ended ctx ends it), unlike Release.
func TestExtendAndTTLHonourAnEndedContext(t *testing.T) {
	e := newReal(t, nil)
	l, err := e.c.TryAcquire(e.ctx, e.key, 10*time.Second)
	require.NoError(t, err)
	ended, cancel := context.WithCancel(e.ctx)
	cancel()
	e.n.reset()
	require.ErrorIs(t, l.Extend(ended, time.Minute), context.Canceled)
	_, err = l.TTL(ended)
	require.ErrorIs(t, err, context.Canceled)
	assert.LessOrEqual(t, e.pttl(e.key), 10*time.Second, "not extended")
	require.NoError(t, l.Release(ended), "Release ignores the cancellation")
	assert.Empty(t, e.get(e.key))
}
