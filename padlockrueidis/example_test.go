package padlockrueidis_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/fipsoff"
	"github.com/padlock-go/padlock/padlockrueidis"
)

// padlock on a rueidis client: New returns the padlock.Client of
// padlock.New, with the same API. An instance still on go-redis takes the
// same lock: the two clients share one queue and one fence counter, so
// a service can move to rueidis one instance at a time.
func ExampleNew() {
	// An in-process miniredis (outside Go's strict FIPS mode, as it hashes
	// scripts with SHA-1), so the example runs anywhere. It has no client
	// tracking, so rueidis's client-side cache is off; on a real Redis
	// that cache is harmless (see Client settings).
	var mr *miniredis.Miniredis
	var err error
	fipsoff.Run(func() { mr, err = miniredis.Run() })
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mr.Addr()}, DisableCache: true})
	if err != nil {
		panic(err)
	}
	defer c.Close() // after the padlock Client's Close
	locks := padlockrueidis.New(c, padlock.WithFencing())
	defer locks.Close()

	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()}) // another instance's
	defer rdb.Close()
	other := padlock.New(rdb)
	defer other.Close()

	ctx := context.Background()
	err = locks.TryDo(ctx, "lock:report:daily", time.Minute, func(ctx context.Context) error {
		fmt.Println("running the report, fence", padlock.LockFromContext(ctx).Fence())
		_, err := other.TryAcquire(ctx, "lock:report:daily", time.Minute)
		fmt.Println("the go-redis instance meanwhile:", errors.Is(err, padlock.ErrNotAcquired))
		return nil
	})
	fmt.Println("report:", err)

	next, err := other.TryAcquire(ctx, "lock:report:daily", time.Minute, padlock.WithFencing())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("the go-redis instance next, fence", next.Fence())
	_ = next.Release(ctx)
	// Output:
	// running the report, fence 1
	// the go-redis instance meanwhile: true
	// report: <nil>
	// the go-redis instance next, fence 2
}
