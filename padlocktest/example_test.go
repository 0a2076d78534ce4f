package padlocktest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/padlocktest"
)

// sendReport stands for the code under test: it sends the daily report
// under a lock, skips when another instance holds it, and stops when the
// lock is lost.
func sendReport(ctx context.Context, locks *padlock.Client, work func(ctx context.Context) error) error {
	err := locks.TryDo(ctx, "lock:report", time.Second, work)
	if errors.Is(err, padlock.ErrNotAcquired) {
		return nil // another instance sends it
	}
	return err
}

// A test of a job that skips when another instance holds its lock, and
// of one that stops when its lock expires under it. In a real test, t is
// the test's *testing.T; here a stand-in runs the test's cleanups.
func ExampleNew() {
	t, done := exampleT()
	defer done()

	locks, srv := padlocktest.New(t)

	// Another instance holds the lock: the job skips.
	other, _ := srv.Client().TryAcquire(context.Background(), "lock:report", time.Minute)
	sent := false
	_ = sendReport(context.Background(), locks, func(context.Context) error { sent = true; return nil })
	fmt.Println("sent while another instance held it:", sent)
	_ = other.Release(context.Background())

	// The lock expires while the job runs: the job's context ends.
	err := sendReport(context.Background(), locks, func(ctx context.Context) error {
		srv.Expire("lock:report")
		<-ctx.Done() // the report's work, which stops when told
		return context.Cause(ctx)
	})
	fmt.Println("stopped with ErrLost:", errors.Is(err, padlock.ErrLost))
	// Output:
	// sent while another instance held it: false
	// stopped with ErrLost: true
}

// exampleT is a stand-in for a test's *testing.T in a runnable example:
// done runs its cleanups, last first.
func exampleT() (t testing.TB, done func()) {
	e := &stand{}
	return e, func() {
		for _, f := range slices.Backward(e.cleanups) {
			f()
		}
	}
}

type stand struct {
	testing.TB // the methods the stand-in does not need; calling them panics
	cleanups   []func()
}

func (*stand) Helper()                      {}
func (e *stand) Cleanup(f func())           { e.cleanups = append(e.cleanups, f) }
func (*stand) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }
