package padlock_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/redistest"
)

// `defer lock.Release(reqCtx)` with a request context that is over by then
// still releases the lock, at once, and the next waiter (in another
// Client) gets it at once rather than after the ttl.
func TestReleaseWithAnEndedContext(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
	e := newReal(t, nil)
	l, err := e.c.TryAcquire(e.ctx, e.key, 50*time.Millisecond)
	require.NoError(t, err)
	time.Sleep(time.Until(l.Deadline()) + time.Millisecond)
	e.n.reset()
	require.ErrorIs(t, l.Release(e.ctx), padlock.ErrNotHeld)
	trips, _ := e.n.reset()
	assert.Zero(t, trips, "nothing sent")
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

func (r *releaseCounter) landed() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// Extend and TTL still honour their context (the caller asked a question:
// an ended ctx ends it), unlike Release.
func TestExtendAndTTLHonourAnEndedContext(t *testing.T) {
	t.Parallel()
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
