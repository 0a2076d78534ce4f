package padlock_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
)

// A background retry of a Release grants the key to a waiter of the same
// Client: its HandOff runs on the Client's observer goroutine, so a
// HandOff that releases a kept-alive lock does not wait for itself, and
// Close does not hang.
func TestAHandOffFromABackgroundReleaseMayCallPadlock(t *testing.T) {
	e := newReal(t, nil)
	ctx := context.Background()
	require.NoError(t, e.raw.ConfigSet(ctx, "busy-reply-threshold", "10").Err())
	var mu sync.Mutex
	var l2s []*padlock.Lock
	handOffStarted, handOffDone := make(chan struct{}), make(chan struct{})
	var once sync.Once
	obs := &padlock.Observer{HandOff: func(key string) {
		once.Do(func() {
			close(handOffStarted)
			buf := make([]byte, 8192)
			t.Logf("HandOff stack:\n%s", buf[:runtime.Stack(buf, false)])
			mu.Lock()
			ls := append([]*padlock.Lock(nil), l2s...)
			mu.Unlock()
			for _, l := range ls {
				_ = l.Release(ctx)
			}
			close(handOffDone)
		})
	}}
	c := padlock.New(e.rdb, padlock.WithObserver(obs))
	l1, err := c.TryAcquire(ctx, "lock:k1", time.Minute)
	require.NoError(t, err)
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	got := make(chan error, 1)
	go func() {
		l, err := c.Acquire(wctx, "lock:k1", time.Minute)
		if err == nil {
			_ = l.Release(ctx)
		}
		got <- err
	}()
	for {
		info, err := c.Inspect(ctx, "lock:k1")
		require.NoError(t, err)
		if info.Waiting == 1 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i := range 60 {
		l, err := c.TryAcquire(ctx, fmt.Sprintf("lock:l2:%d", i), 300*time.Millisecond)
		require.NoError(t, err)
		l.KeepAlive(ctx)
		mu.Lock()
		l2s = append(l2s, l)
		mu.Unlock()
		time.Sleep(time.Duration(i%7) * time.Millisecond)
	}
	// Redis busy for 60ms: BUSY errors after 10ms.
	go func() {
		_ = e.raw.Eval(ctx, `local s = redis.call('TIME'); local st = s[1] * 1000000 + s[2]
while true do local n = redis.call('TIME'); if n[1] * 1000000 + n[2] - st > 60000 then break end end
return 1`, nil).Err()
	}()
	time.Sleep(25 * time.Millisecond)
	err = l1.Release(ctx)
	t.Logf("Release during BUSY: %v", err)
	require.Error(t, err)
	select {
	case <-handOffStarted:
	case <-time.After(5 * time.Second):
		t.Fatal("no HandOff")
	}
	select {
	case <-handOffDone:
		t.Log("HandOff returned")
	case <-time.After(3 * time.Second):
		closed := make(chan struct{})
		go func() { _ = c.Close(); close(closed) }()
		select {
		case <-closed:
			t.Fatal("HandOff that releases a kept-alive lock did not return in 3s (Close returned)")
		case <-time.After(3 * time.Second):
			t.Fatal("HandOff that releases a kept-alive lock did not return in 3s, and Close hangs")
		}
	}
	require.NoError(t, c.Close())
}
