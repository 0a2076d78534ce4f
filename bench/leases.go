package main

import (
	"context"
	"fmt"
	"log"
	"runtime"
	"strconv"
	"time"

	"github.com/padlock-go/padlock"
)

// leases: 10,000 padlock locks with ttl 3s, kept alive for 8s. Peers have
// no keep-alive of their own, so only padlock runs here.
func leases(addr string) {
	const n, ttl, hold = 10000, 3 * time.Second, 8 * time.Second
	rdb, cnt := countedClient(addr)
	defer rdb.Close()
	c := padlock.New(rdb)
	defer c.Close()
	ctx := context.Background()

	runtime.GC()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()

	locks := make([]*padlock.Lock, n)
	kctxs := make([]context.Context, n)
	stops := make([]context.CancelFunc, n)
	start := time.Now()
	for i := range n {
		l, err := c.TryAcquire(ctx, "bench:lease:"+strconv.Itoa(i), ttl)
		if err != nil {
			log.Fatal(err)
		}
		locks[i] = l
		kctxs[i], stops[i] = l.KeepAlive(ctx)
	}
	took := time.Since(start)

	runtime.GC()
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)
	g1 := runtime.NumGoroutine()

	cnt.trips.Store(0)
	calls0 := serverCalls(rdb)
	time.Sleep(hold)
	trips, calls := cnt.trips.Load(), serverCalls(rdb)-calls0-1
	lost := 0
	for i := range n {
		if kctxs[i].Err() != nil {
			lost++
		}
	}
	for i := range n {
		stops[i]()
		if err := locks[i].Release(ctx); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Printf("## Leases: %d padlock locks, ttl %v, kept alive for %v\n\n", n, ttl, hold)
	fmt.Println("| leases lost | round trips/s | Redis commands/s | goroutines/lease | heap bytes/lease | time to take all |")
	fmt.Println("| ---: | ---: | ---: | ---: | ---: | ---: |")
	fmt.Printf("| %d | %.1f | %.0f | %.4f | %.0f | %v |\n\n", lost, float64(trips)/hold.Seconds(), float64(calls)/hold.Seconds(),
		float64(g1-g0)/n, float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc))/n, took.Round(time.Millisecond))
}
