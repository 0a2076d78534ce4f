package main

import (
	"context"
	"fmt"
	"log"
	"runtime"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock"
)

// leaseCount, leaseTTL and leaseHold are the leases scenario's: how many
// locks, their ttl, and how long they are kept alive.
const (
	leaseCount = 10000
	leaseTTL   = 3 * time.Second
	leaseHold  = 8 * time.Second
)

// leaseResult is what one driver did in the leases scenario.
type leaseResult struct {
	name       string
	lost       int
	counted    counts
	goroutines int
	heap       int64
	took       time.Duration
}

// leases: on each driver, 10,000 padlock locks with ttl 3s, kept alive for
// 8s. Peers have no keep-alive of their own, so only padlock runs here.
func leases(addr string) {
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	var rows []leaseResult
	for _, drv := range padlockDrivers() {
		rows = append(rows, leasesRun(addr, admin, drv))
	}
	fmt.Printf("## Leases: %d padlock locks, ttl %v, kept alive for %v\n\n", leaseCount, leaseTTL, leaseHold)
	fmt.Println("| driver | leases lost | round trips/s | socket writes/s | Redis commands/s | goroutines/lease | heap bytes/lease | time to take all |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range rows {
		fmt.Printf("| %s | %d | %.1f | %.1f | %.0f | %.4f | %.0f | %v |\n", r.name, r.lost, float64(r.counted.trips)/leaseHold.Seconds(),
			float64(r.counted.writes)/leaseHold.Seconds(), float64(r.counted.calls)/leaseHold.Seconds(),
			float64(r.goroutines)/leaseCount, float64(r.heap)/leaseCount, r.took.Round(time.Millisecond))
	}
	fmt.Println()
}

// leasesRun is leases on one driver.
func leasesRun(addr string, admin *redis.Client, drv padlockDriver) leaseResult {
	c, cnt, closeAll := drv.open(addr)
	defer closeAll()
	ctx := context.Background()

	runtime.GC()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()

	locks := make([]*padlock.Lock, leaseCount)
	kctxs := make([]context.Context, leaseCount)
	stops := make([]context.CancelFunc, leaseCount)
	start := time.Now()
	for i := range leaseCount {
		l, err := c.TryAcquire(ctx, "bench:lease:"+strconv.Itoa(i), leaseTTL)
		if err != nil {
			log.Fatal(err)
		}
		locks[i] = l
		kctxs[i], stops[i] = l.KeepAlive(ctx)
	}
	r := leaseResult{name: drv.name, took: time.Since(start)}

	runtime.GC()
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)
	r.goroutines, r.heap = runtime.NumGoroutine()-g0, int64(m1.HeapAlloc)-int64(m0.HeapAlloc)

	c0 := snapshot(cnt, admin)
	time.Sleep(leaseHold)
	c1 := snapshot(cnt, admin)
	r.counted = counts{c1.trips - c0.trips, c1.writes - c0.writes, c1.calls - c0.calls - 1}
	for i := range leaseCount {
		if kctxs[i].Err() != nil {
			r.lost++
		}
	}
	for i := range leaseCount {
		stops[i]()
		if err := locks[i].Release(ctx); err != nil {
			log.Fatal(err)
		}
	}
	return r
}
