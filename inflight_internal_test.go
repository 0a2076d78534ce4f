package padlock

import (
	"context"
	"testing"

	"github.com/padlock-go/padlock/driver"
)

// gateDriver's Do says it entered, waits for gate, then answers "OK".
type gateDriver struct {
	driver.Driver
	in   chan struct{}
	gate chan struct{}
}

func (g gateDriver) Do(ctx context.Context, key string, args ...any) (any, error) {
	g.in <- struct{}{}
	<-g.gate
	return "OK", nil
}

// A caller that leaves a call in flight gets an unfinishedError whose done
// is the call's; the reply that comes after must not race with it.
func TestALeftCallAlwaysHasItsDone(t *testing.T) {
	left := 0
	for range 500 {
		g := gateDriver{in: make(chan struct{}, 1), gate: make(chan struct{})}
		b := bounded{g}
		ctx, cancel := context.WithCancel(context.Background())
		res := make(chan error, 1)
		go func() {
			_, err := b.Do(ctx, "k", "set", "k", "v")
			res <- err
		}()
		<-g.in
		go cancel()
		close(g.gate) // the reply comes as the caller leaves
		err := <-res
		if err == nil {
			continue
		}
		left++
		if u := unfinished(err); u == nil {
			t.Fatalf("left in flight, but no done to wait for: %v", err)
		}
	}
	t.Logf("%d left", left)
}
