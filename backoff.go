package padlock

import (
	"context"
	"math/rand/v2"
	"time"
)

// A Backoff says how long to wait before the next attempt, given how many
// attempts have failed before it (0 for the first wait). It must be safe
// for concurrent use; a function of attempt alone, like the ones
// ExponentialBackoff returns, can be shared by every goroutine.
type Backoff func(attempt int) time.Duration

// defaultBackoff is the Backoff used when none is given.
var defaultBackoff = ExponentialBackoff(8*time.Millisecond, 512*time.Millisecond)

// ExponentialBackoff returns a stateless, jittered Backoff: the wait before
// retry n is drawn uniformly from [d/2, d], where d is lo doubled n times
// and capped at hi. A lo under 1ms is taken as 1ms, a hi under lo as lo.
func ExponentialBackoff(lo, hi time.Duration) Backoff {
	lo = max(lo, time.Millisecond)
	hi = max(hi, lo)
	return func(attempt int) time.Duration {
		d := hi
		if attempt >= 0 && attempt < 62 && lo<<attempt > 0 && lo<<attempt < hi {
			d = lo << attempt
		}
		return d/2 + rand.N(d-d/2+1)
	}
}

// sleep waits for d, or until ctx ends, and then returns ctx's error.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
