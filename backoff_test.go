package padlock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/padlock-go/padlock"
	"github.com/stretchr/testify/assert"
)

func TestExponentialBackoff(t *testing.T) {
	tests := []struct {
		name     string
		min, max time.Duration
		attempt  int
		lo, hi   time.Duration
	}{
		{"first", 8 * time.Millisecond, time.Second, 0, 4 * time.Millisecond, 8 * time.Millisecond},
		{"doubles", 8 * time.Millisecond, time.Second, 3, 32 * time.Millisecond, 64 * time.Millisecond},
		{"capped", 8 * time.Millisecond, time.Second, 20, 500 * time.Millisecond, time.Second},
		{"no overflow", 8 * time.Millisecond, time.Second, 1000, 500 * time.Millisecond, time.Second},
		{"negative attempt", 8 * time.Millisecond, time.Second, -1, 500 * time.Millisecond, time.Second},
		{"min floor", 0, 0, 0, 500 * time.Microsecond, time.Millisecond},
		{"max under min", 10 * time.Millisecond, time.Millisecond, 5, 5 * time.Millisecond, 10 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := padlock.ExponentialBackoff(tt.min, tt.max)
			seen := map[time.Duration]bool{}
			for range 200 {
				d := b(tt.attempt)
				if d < tt.lo || d > tt.hi {
					t.Fatalf("b(%d) = %v, want in [%v, %v]", tt.attempt, d, tt.lo, tt.hi)
				}
				seen[d] = true
			}
			assert.Greater(t, len(seen), 10, "jittered")
		})
	}
}

// One Backoff value shared by many goroutines: stateless, so no race.
func TestBackoffIsSharable(t *testing.T) {
	t.Parallel()
	b := padlock.ExponentialBackoff(time.Millisecond, time.Second)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range 1000 {
				if d := b(i % 12); d <= 0 {
					t.Errorf("b(%d) = %v", i%12, d)
				}
			}
		})
	}
	wg.Wait()
}
