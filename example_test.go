package padlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock"
)

// exampleRedis starts an in-process miniredis so the examples run
// anywhere; in a service, rdb is your usual go-redis client.
func exampleRedis() (*redis.Client, func()) {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	return rdb, func() {
		_ = rdb.Close()
		mr.Close()
	}
}

// Five instances of a service reach the daily report at the same moment;
// exactly one of them runs it.
func Example() {
	rdb, stop := exampleRedis()
	defer stop()
	locks := padlock.New(rdb)
	ctx := context.Background()

	var runs, skipped sync.WaitGroup
	var mu sync.Mutex
	ran := 0
	skipped.Add(4) // the report waits for the others to give up, to make the race visible
	for instance := 1; instance <= 5; instance++ {
		runs.Go(func() {
			err := locks.TryDo(ctx, "lock:report:daily", 2*time.Minute, func(ctx context.Context) error {
				mu.Lock()
				ran++
				mu.Unlock()
				skipped.Wait()
				return nil // runReport(ctx)
			})
			if errors.Is(err, padlock.ErrNotAcquired) {
				skipped.Done() // another instance has it: nothing to do
			}
		})
	}
	runs.Wait()
	fmt.Println("reports run:", ran)
	// Output:
	// reports run: 1
}

func ExampleClient_Acquire() {
	rdb, stop := exampleRedis()
	defer stop()
	locks := padlock.New(rdb)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	lock, err := locks.Acquire(ctx, "lock:order:42", 30*time.Second)
	if err != nil {
		fmt.Println("could not lock order 42:", err)
		return
	}
	defer lock.Release(context.Background())
	fmt.Println("updating", lock.Key())
	// Output:
	// updating lock:order:42
}

func ExampleClient_TryAcquire() {
	rdb, stop := exampleRedis()
	defer stop()
	locks := padlock.New(rdb)
	ctx := context.Background()

	first, _ := locks.TryAcquire(ctx, "lock:migration", time.Minute)
	_, err := locks.TryAcquire(ctx, "lock:migration", time.Minute)
	fmt.Println("second attempt:", errors.Is(err, padlock.ErrNotAcquired))

	_ = first.Release(ctx)
	again, err := locks.TryAcquire(ctx, "lock:migration", time.Minute)
	fmt.Println("after release:", err == nil)
	_ = again.Release(ctx)
	// Output:
	// second attempt: true
	// after release: true
}

// A long job holds a lease that is renewed in the background, and stops
// when the lease is lost.
func ExampleLock_KeepAlive() {
	rdb, stop := exampleRedis()
	defer stop()
	locks := padlock.New(rdb)
	ctx := context.Background()

	lock, err := locks.TryAcquire(ctx, "lock:migration", 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Release(ctx)
	jobCtx, stopRenewing := lock.KeepAlive(ctx)
	defer stopRenewing()

	for step := 1; step <= 3; step++ {
		if jobCtx.Err() != nil {
			fmt.Println("lease lost:", context.Cause(jobCtx))
			return
		}
		fmt.Println("migrating step", step) // work that honours jobCtx
	}
	// Output:
	// migrating step 1
	// migrating step 2
	// migrating step 3
}

// Fencing tokens let storage reject a write from a holder whose lock has
// already expired, here a holder paused past its ttl.
func ExampleWithFencing() {
	rdb, stop := exampleRedis()
	defer stop()
	locks := padlock.New(rdb, padlock.WithFencing())
	ctx := context.Background()

	// The storage remembers the highest fence it has seen.
	var highest int64
	write := func(fence int64, what string) {
		if fence < highest {
			fmt.Printf("rejected %q from fence %d\n", what, fence)
			return
		}
		highest = fence
		fmt.Printf("stored %q from fence %d\n", what, fence)
	}

	paused, _ := locks.TryAcquire(ctx, "lock:file", time.Second)
	_ = rdb.Del(ctx, "lock:file") // stands for: paused past its ttl, the lock expired
	next, _ := locks.TryAcquire(ctx, "lock:file", time.Second)

	write(next.Fence(), "new")
	write(paused.Fence(), "stale") // the paused holder wakes up and writes
	// Output:
	// stored "new" from fence 2
	// rejected "stale" from fence 1
}

func ExampleLockFromContext() {
	rdb, stop := exampleRedis()
	defer stop()
	locks := padlock.New(rdb, padlock.WithFencing())

	_ = locks.Do(context.Background(), "lock:ledger", time.Minute, func(ctx context.Context) error {
		fmt.Println("writing with fence", padlock.LockFromContext(ctx).Fence())
		return nil
	})
	// Output:
	// writing with fence 1
}

// A fence-checking store in Redis: a write carries the writer's fence and
// is applied only if no higher fence has written before. A holder paused
// past its ttl cannot overwrite the work of the holder after it.
func ExampleLock_Fence() {
	rdb, stop := exampleRedis()
	defer stop()
	locks := padlock.New(rdb, padlock.WithFencing())
	ctx := context.Background()

	// KEYS[1]: the record, a hash with its value and the highest fence seen.
	write := redis.NewScript(`
local last = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if tonumber(ARGV[1]) < last then return 0 end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
return 1`)

	paused, _ := locks.TryAcquire(ctx, "lock:invoice:7", time.Second)
	_ = rdb.Del(ctx, "lock:invoice:7") // stands for: paused past its ttl, the lock expired
	next, _ := locks.TryAcquire(ctx, "lock:invoice:7", time.Second)

	ok, _ := write.Run(ctx, rdb, []string{"invoice:7"}, next.Fence(), "paid").Bool()
	fmt.Println("new holder's write applied:", ok)
	ok, _ = write.Run(ctx, rdb, []string{"invoice:7"}, paused.Fence(), "unpaid").Bool()
	fmt.Println("paused holder's write applied:", ok)
	fmt.Println("invoice:", rdb.HGet(ctx, "invoice:7", "value").Val())
	// Output:
	// new holder's write applied: true
	// paused holder's write applied: false
	// invoice: paid
}
