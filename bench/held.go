package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"
)

// held: one goroutine takes one key and holds it while nothing else
// happens; what that costs Redis, counted from settle after the take, past
// rueidislock's first renewal (at KeyValidity/2, lockTTL/2), for window.
// Of the implementations here only rueidislock keeps a lock alive by
// itself (padlock's try is a TryAcquire, with no KeepAlive), so the others
// should cost nothing; with client tracking but no NOLOOP, rueidislock's
// holder is told of its own renewal's write, and renews again.
func held(addr string) {
	const settle, window = lockTTL/2 + 500*time.Millisecond, 3 * time.Second
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	fmt.Printf("## Held: one goroutine holds one key, nothing else happens; counted from %v to %v after the take\n\n", settle, settle+window)
	fmt.Println("| implementation | Redis commands/s | round trips/s |")
	fmt.Println("| --- | ---: | ---: |")
	for _, im := range impls() {
		l, cnt := im.new(addr)
		ctx := context.Background()
		unlock, err := l.try(ctx, "bench:held", lockTTL)
		if err != nil {
			log.Fatalf("%s: %v", l, err)
		}
		time.Sleep(settle)
		cnt.reset()
		calls0, start := serverCalls(admin), time.Now()
		time.Sleep(window)
		calls, trips, took := serverCalls(admin)-calls0-1, cnt.trips.Load(), time.Since(start) // -1: not the INFO itself
		if err := unlock(ctx); err != nil {
			log.Fatalf("%s: release: %v", l, err)
		}
		l.close()
		fmt.Printf("| %s | %.0f | %.0f |\n", l, float64(calls)/took.Seconds(), float64(trips)/took.Seconds())
	}
	fmt.Println()
}
