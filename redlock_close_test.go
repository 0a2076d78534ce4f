package padlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Extend on a Redlock while Close runs: no race between the node calls
// that Close waits for and Close (run it with -race).
func TestRedlockExtendDuringClose(t *testing.T) {
	e := startRedlock(t, 3)
	ctx := context.Background()
	l, err := e.c.TryAcquire(ctx, "lock:race", time.Minute)
	require.NoError(t, err)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = l.Extend(ctx, time.Minute)
		}
	}()
	time.Sleep(50 * time.Millisecond)
	for range 1 {
		_ = e.c.Close()
	}
	close(stop)
	<-done
}
