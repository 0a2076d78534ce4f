package padlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock"
)

// A transfer locks both of its accounts at once, in one step: no transfer
// holds one account while it waits for the other, so two transfers that
// lock the same accounts in opposite orders cannot deadlock. A transfer
// that needs an account another one holds waits, and gets all its keys
// together once they are free.
func ExampleClient_AcquireMany() {
	rdb, stop := exampleRedis()
	defer stop()
	locks := padlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	first, err := locks.AcquireMany(ctx, []string{"lock:account:1", "lock:account:2"}, time.Minute)
	if err != nil {
		fmt.Println("transfer 1:", err)
		return
	}
	fmt.Println("transfer 1 holds", first.Keys())

	waiting := make(chan struct{})
	second := make(chan *padlock.Lock)
	go func() {
		l, _ := locks.AcquireMany(ctx, []string{"lock:account:2", "lock:account:3"}, time.Minute,
			padlock.WithObserver(&padlock.Observer{
				WaitStart: func(context.Context, string) { close(waiting) },
			}))
		second <- l
	}()
	<-waiting
	fmt.Println("transfer 2 waits for account 2")

	_ = first.Release(ctx)
	l := <-second
	fmt.Println("transfer 2 holds", l.Keys())
	_ = l.Release(ctx)
	// Output:
	// transfer 1 holds [lock:account:1 lock:account:2]
	// transfer 2 waits for account 2
	// transfer 2 holds [lock:account:2 lock:account:3]
}

// All of the keys or none: when another holder has one of them,
// TryAcquireMany takes none of the others either, and returns at once.
func ExampleClient_TryAcquireMany() {
	rdb, stop := exampleRedis()
	defer stop()
	locks := padlock.New(rdb)
	ctx := context.Background()

	busy, _ := locks.TryAcquire(ctx, "lock:account:2", time.Minute) // another transfer's
	_, err := locks.TryAcquireMany(ctx, []string{"lock:account:1", "lock:account:2"}, time.Minute)
	fmt.Println("not acquired:", errors.Is(err, padlock.ErrNotAcquired))
	info, _ := locks.Inspect(ctx, "lock:account:1")
	fmt.Println("account 1 held:", info.Held)

	_ = busy.Release(ctx)
	both, err := locks.TryAcquireMany(ctx, []string{"lock:account:1", "lock:account:2"}, time.Minute)
	fmt.Println("after the release:", err, both.Keys())
	_ = both.Release(ctx) // releases every key
	// Output:
	// not acquired: true
	// account 1 held: false
	// after the release: <nil> [lock:account:1 lock:account:2]
}

// What an operator sees of a key (the same as `padlock inspect`): who
// holds it, with the metadata the holder stored, its time left and the
// key's fencing counter. A free key is not an error: Held is false, and
// the fencing counter outlives the lock, so the next holder's fence is
// higher.
func ExampleClient_Inspect() {
	rdb, stop := exampleRedis()
	defer stop()
	locks := padlock.New(rdb)
	ctx := context.Background()

	lock, err := locks.TryAcquire(ctx, "lock:report", time.Minute,
		padlock.WithFencing(), padlock.WithMetadata("host=web-3 job=daily"))
	if err != nil {
		fmt.Println(err)
		return
	}
	info, err := locks.Inspect(ctx, "lock:report")
	if err != nil {
		fmt.Println("Redis cannot answer:", err)
		return
	}
	fmt.Println("held:", info.Held, info.Kind)
	fmt.Println("by:", info.Metadata)
	fmt.Println("our token:", info.Token == lock.Token())
	fmt.Println("time left:", info.TTL.Round(time.Second))
	fmt.Println("fence:", info.Fence, "waiting:", info.Waiting)

	_ = lock.Release(ctx)
	info, _ = locks.Inspect(ctx, "lock:report")
	fmt.Printf("released: %+v\n", info)
	info, _ = locks.Inspect(ctx, "lock:never-taken")
	fmt.Printf("never taken: %+v\n", info)
	// Output:
	// held: true lock
	// by: host=web-3 job=daily
	// our token: true
	// time left: 1m0s
	// fence: 1 waiting: 0
	// released: {Key:lock:report Held:false Kind: Token: Metadata: TTL:0s Fence:1 HeldFor:0s MinHold:0s Holders:[] Limit:0 Waiting:0 OldestWait:0s}
	// never taken: {Key:lock:never-taken Held:false Kind: Token: Metadata: TTL:0s Fence:0 HeldFor:0s MinHold:0s Holders:[] Limit:0 Waiting:0 OldestWait:0s}
}

// A lock on three independent Redis primaries (the Redlock algorithm): it
// is taken when a majority of them, two of three, take it, so locks are
// still taken and released with one of them down. Every instance of the
// service makes its Client over the same primaries.
func ExampleNewRedlock() {
	var servers []*miniredis.Miniredis
	var nodes []redis.UniversalClient
	for range 3 {
		mr := runMiniredis()
		defer mr.Close()
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		defer rdb.Close()
		servers, nodes = append(servers, mr), append(nodes, rdb)
	}
	locks := padlock.NewRedlock(nodes)
	defer locks.Close()
	other := padlock.NewRedlock(nodes) // another instance's
	defer other.Close()
	ctx := context.Background()

	lock, err := locks.TryAcquire(ctx, "lock:payout", time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = other.TryAcquire(ctx, "lock:payout", time.Minute)
	fmt.Println("another instance:", errors.Is(err, padlock.ErrNotAcquired))
	fmt.Println("release:", lock.Release(ctx))
	lock, err = other.TryAcquire(ctx, "lock:payout", time.Minute)
	fmt.Println("another instance, after the release:", err)
	_ = lock.Release(ctx)

	servers[2].Close() // one primary goes down
	lock, err = locks.TryAcquire(ctx, "lock:refund", time.Minute)
	fmt.Println("with one primary down:", err)
	fmt.Println("release:", lock.Release(ctx))
	// Output:
	// another instance: true
	// release: <nil>
	// another instance, after the release: <nil>
	// with one primary down: <nil>
	// release: <nil>
}

// What this process holds and waits for, without a round trip: for a
// status page or a debug endpoint (padlockweb shows it), or a log line at
// shutdown.
func ExampleClient_Local() {
	rdb, stop := exampleRedis()
	defer stop()
	locks := padlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	report, _ := locks.TryAcquire(ctx, "lock:report", time.Minute, padlock.WithMetadata("daily"))
	lead, _ := locks.Campaign(ctx, "lead:scheduler", time.Minute, "host=web-1")
	waiting := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		l, err := locks.Acquire(ctx, "lock:report", time.Minute, padlock.WithObserver(&padlock.Observer{
			WaitStart: func(context.Context, string) { close(waiting) },
		}))
		if err == nil {
			fmt.Println("the wait got lock:report")
			_ = l.Release(ctx)
		}
	}()
	<-waiting

	for _, l := range locks.Local() {
		state := "holds"
		if l.Waiting {
			state = "waits for"
		}
		fmt.Printf("%s %s (%s, %q)\n", state, l.Key, l.Kind, l.Metadata)
	}
	_ = report.Release(ctx)
	_ = lead.Resign(ctx)
	<-done
	fmt.Println(len(locks.Local()), "left")
	// Output:
	// holds lock:report (lock, "daily")
	// holds lead:scheduler (leader, "host=web-1")
	// waits for lock:report (lock, "")
	// the wait got lock:report
	// 0 left
}
