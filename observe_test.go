package padlock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
)

// recorder is an Observer that writes every event as a line.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	r.events = append(r.events, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.events
	r.events = nil
	return e
}

type spanKey struct{}

func (r *recorder) observer() *padlock.Observer {
	return &padlock.Observer{
		AcquireStart: func(ctx context.Context, i padlock.AcquireStartInfo) context.Context {
			r.add("acquire start %s wait=%v", i.Key, i.Wait)
			return context.WithValue(ctx, spanKey{}, "span")
		},
		AcquireDone: func(ctx context.Context, i padlock.AcquireDoneInfo) {
			r.add("acquire done %s %s ctx=%v", i.Key, i.Outcome(), ctx.Value(spanKey{}))
		},
		WaitStart: func(_ context.Context, key string) { r.add("wait start %s", key) },
		WaitDone:  func(_ context.Context, key string) { r.add("wait done %s", key) },
		HandOff:   func(key string) { r.add("hand-off %s", key) },
		ReleaseStart: func(ctx context.Context, key string) context.Context {
			r.add("release start %s", key)
			return ctx
		},
		ReleaseDone: func(_ context.Context, i padlock.ReleaseDoneInfo) {
			r.add("release done %s err=%v", i.Key, i.Err != nil)
		},
		Extend: func(_ context.Context, i padlock.ExtendInfo) {
			r.add("extend %s %v err=%v", i.Key, i.TTL, i.Err != nil)
		},
		Renewal: func(i padlock.RenewalInfo) {
			r.add("renewal %s ok=%v lost=%v", i.Key, i.Err == nil, errors.Is(i.Err, padlock.ErrLost))
		},
		HoldEnd: func(i padlock.HoldEndInfo) {
			r.add("hold end %s lost=%v cause=%v", i.Key, i.Lost, errors.Is(i.Cause, padlock.ErrLost))
		},
	}
}

func TestObserverSeesEveryEvent(t *testing.T) {
	t.Parallel() // mostly waits, on servers of its own
	e := newReal(t, nil)
	rec := &recorder{}
	c := padlock.New(e.rdb, padlock.WithObserver(rec.observer()))
	defer c.Close()
	other := padlock.New(e.raw)
	defer other.Close()
	k := e.key

	l, err := c.TryAcquire(e.ctx, k, time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Extend(e.ctx, 2*time.Second))
	require.NoError(t, l.Release(e.ctx))
	assert.Equal(t, []string{
		"acquire start " + k + " wait=false",
		"acquire done " + k + " acquired ctx=span",
		"extend " + k + " 2s err=false",
		"release start " + k,
		"hold end " + k + " lost=false cause=false",
		"release done " + k + " err=false",
	}, rec.take(), "uncontended")

	held, err := other.TryAcquire(e.ctx, k, 10*time.Second)
	require.NoError(t, err)
	_, err = c.TryAcquire(e.ctx, k, time.Second)
	require.ErrorIs(t, err, padlock.ErrNotAcquired)
	assert.Equal(t, []string{
		"acquire start " + k + " wait=false",
		"acquire done " + k + " not_acquired ctx=span",
	}, rec.take(), "conflict")

	go func() {
		// Late enough that the waiter has subscribed and waits, also
		// under -race on a loaded machine.
		time.Sleep(time.Second)
		_ = held.Release(context.Background())
	}()
	l, err = c.Acquire(e.ctx, k, 300*time.Millisecond)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"acquire start " + k + " wait=true",
		"wait start " + k,
		"hand-off " + k,
		"wait done " + k,
		"acquire done " + k + " acquired ctx=span",
	}, rec.take(), "a wait woken by a release that hands the lock over")

	kctx, stop := l.KeepAlive(e.ctx)
	defer stop()
	time.Sleep(380 * time.Millisecond) // renewals at ttl/3: three, or at least two on a loaded machine
	require.NoError(t, e.raw.Del(e.ctx, k).Err())
	waitDone(t, kctx, 2*time.Second)
	var events []string
	require.Eventually(t, func() bool {
		events = append(events, rec.take()...)
		return len(events) > 0 && strings.HasPrefix(events[len(events)-1], "hold end")
	}, time.Second, time.Millisecond, "told right after the context is cancelled")
	last := events[len(events)-2:]
	assert.Equal(t, []string{
		"renewal " + k + " ok=false lost=true",
		"hold end " + k + " lost=true cause=true",
	}, last, "taken away: %v", events)
	renewals := 0
	for _, ev := range events[:len(events)-2] {
		assert.Equal(t, "renewal "+k+" ok=true lost=false", ev)
		renewals++
	}
	assert.GreaterOrEqual(t, renewals, 2)
	require.ErrorIs(t, l.Release(e.ctx), padlock.ErrNotHeld)
	assert.Equal(t, []string{"release start " + k, "release done " + k + " err=true"}, rec.take(),
		"no second hold end")
}

// Several observers are all called, in order; per-call observers add to
// the Client's.
func TestObserversCompose(t *testing.T) {
	t.Parallel()
	e := newMini(t)
	var got []string
	var mu sync.Mutex
	obs := func(name string) *padlock.Observer {
		return &padlock.Observer{AcquireDone: func(_ context.Context, i padlock.AcquireDoneInfo) {
			mu.Lock()
			got = append(got, name+" "+i.Outcome())
			mu.Unlock()
		}}
	}
	c := padlock.New(e.rdb, padlock.WithObserver(obs("a")), padlock.WithObserver(nil), padlock.WithObserver(obs("b")))
	l, err := c.TryAcquire(e.ctx, e.key, time.Second, padlock.WithObserver(obs("call")))
	require.NoError(t, err)
	require.NoError(t, l.Release(e.ctx))
	assert.Equal(t, []string{"a acquired", "b acquired", "call acquired"}, got)
}

// WithLogger: a WARN naming the key when a kept-alive lock is lost, a WARN
// for a release that fails for another reason than "not ours", DEBUG for a
// failed renewal; nothing for what goes well.
func TestWithLogger(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(syncWriter{&mu, &buf}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := padlock.New(e.rdb, padlock.WithLogger(logger))
	defer c.Close()
	logged := func() string {
		mu.Lock()
		defer mu.Unlock()
		s := buf.String()
		buf.Reset()
		return s
	}

	l, err := c.TryAcquire(e.ctx, e.key, time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(e.ctx))
	assert.Empty(t, logged(), "nothing to say")

	l, err = c.TryAcquire(e.ctx, e.key, 300*time.Millisecond)
	require.NoError(t, err)
	kctx, stop := l.KeepAlive(e.ctx)
	defer stop()
	require.NoError(t, e.raw.Del(e.ctx, e.key).Err())
	waitDone(t, kctx, 2*time.Second)
	var out string
	require.Eventually(t, func() bool { out += logged(); return strings.Contains(out, "lock lost") }, time.Second, time.Millisecond,
		"logged right after the context is cancelled")
	assert.Contains(t, out, `level=WARN msg="padlock: lock lost" key=`+e.key)
	assert.Contains(t, out, "cause=")
	assert.Contains(t, out, "held=")
	require.ErrorIs(t, l.Release(e.ctx), padlock.ErrNotHeld)
	assert.Empty(t, logged(), "ErrNotHeld from Release is not worth a warning")

	// Redis goes away: renewals fail (DEBUG), and so does a release (WARN).
	kept, err := c.TryAcquire(e.ctx, e.key+":kept", 600*time.Millisecond)
	require.NoError(t, err)
	_, stop = kept.KeepAlive(e.ctx)
	defer stop()
	held, err := c.TryAcquire(e.ctx, e.key+":held", time.Minute)
	require.NoError(t, err)
	e.srv.Stop()
	require.Error(t, held.Release(e.ctx))
	out = logged()
	assert.Contains(t, out, `level=WARN msg="padlock: release failed" key=`+e.key+":held")
	require.Eventually(t, func() bool {
		out += logged()
		return strings.Contains(out, `level=DEBUG msg="padlock: renewal failed, will retry" key=`+e.key+":kept")
	}, 5*time.Second, 10*time.Millisecond, "a failed renewal: %s", out)
	stop()
	require.NoError(t, c.Close()) // abandons the held lock's pending release
}

type syncWriter struct {
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (w syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

// An Observer's funcs may call the Lock's methods: a HoldEnd that releases
// the lost Lock and a Renewal that reads its TTL both return (the renewals
// do not wait for them), and the Client goes on working.
func TestObserverMayCallTheLock(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	var lock atomic.Pointer[padlock.Lock]
	released, ttlRead := make(chan error, 1), make(chan error, 1)
	obs := &padlock.Observer{
		Renewal: func(padlock.RenewalInfo) {
			if l := lock.Load(); l != nil {
				_, err := l.TTL(context.Background())
				select {
				case ttlRead <- err:
				default:
				}
			}
		},
		HoldEnd: func(i padlock.HoldEndInfo) {
			if i.Lost {
				released <- lock.Load().Release(context.Background())
			}
		},
	}
	c := padlock.New(e.rdb, padlock.WithObserver(obs))
	defer c.Close()
	l, err := c.TryAcquire(e.ctx, e.key, 300*time.Millisecond)
	require.NoError(t, err)
	lock.Store(l)
	kctx, stop := l.KeepAlive(e.ctx)
	defer stop()
	select {
	case err := <-ttlRead:
		require.NoError(t, err, "TTL from Renewal")
	case <-time.After(time.Second):
		t.Fatal("a Renewal that calls TTL did not return")
	}
	require.NoError(t, e.raw.Del(e.ctx, e.key).Err()) // lost
	waitDone(t, kctx, 2*time.Second)
	select {
	case err := <-released:
		require.ErrorIs(t, err, padlock.ErrNotHeld, "Release from HoldEnd")
	case <-time.After(time.Second):
		t.Fatal("a HoldEnd that calls Release did not return")
	}
	l2, err := c.TryAcquire(e.ctx, e.key, time.Second)
	require.NoError(t, err, "the Client still works")
	require.NoError(t, l2.Release(e.ctx))
}
