// A module outside the repository that requires padlockrueidis as a user's
// `go get` does (.ci/run copies this file into it): a lock on a rueidis
// client is exclusive and released.
package outside

import (
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/padlockrueidis"
)

func TestLock(t *testing.T) {
	mr := miniredis.RunT(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mr.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	locks := padlockrueidis.New(c)
	t.Cleanup(func() { _ = locks.Close() }) // before c.Close: cleanups run last-in first-out

	l, err := locks.TryAcquire(t.Context(), "lock:outside", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := locks.TryAcquire(t.Context(), "lock:outside", time.Minute); !errors.Is(err, padlock.ErrNotAcquired) {
		t.Fatalf("second TryAcquire: %v, want ErrNotAcquired", err)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if mr.Exists("lock:outside") {
		t.Fatal("the lock is still held after Release")
	}
}
