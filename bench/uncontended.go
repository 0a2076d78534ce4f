package main

import (
	"context"
	"fmt"
	"log"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// uncontended: 8 goroutines, each on its own key, take and release it.
func uncontended(addr string) { uncontendedBy(addr, 8) }

// lone: one goroutine takes and releases its key.
func lone(addr string) { uncontendedBy(addr, 1) }

// many: 64, then 256 goroutines, each on its own key.
func many(addr string) {
	uncontendedBy(addr, 64)
	uncontendedBy(addr, 256)
}

// cycleTimes counts the cycles of a turn by their time, in µs (the last
// bucket takes the longer ones): a fixed array, so that counting
// allocates nothing.
var cycleTimes [20000]atomic.Int64

// uncontendedBy runs goroutines goroutines, each on its own key, that take
// and release it, each implementation in turn.
func uncontendedBy(addr string, goroutines int) {
	p50 := map[string][]time.Duration{}
	all := turns(addr, func(l locker, d time.Duration) (int64, []time.Duration) {
		for i := range cycleTimes {
			cycleTimes[i].Store(0)
		}
		var cycles atomic.Int64
		var wg sync.WaitGroup
		stop := time.Now().Add(d)
		for g := range goroutines {
			wg.Go(func() {
				key := "bench:uncontended:" + strconv.Itoa(g)
				ctx := context.Background()
				for {
					start := time.Now()
					if !start.Before(stop) {
						return
					}
					unlock, err := l.try(ctx, key, lockTTL)
					if err != nil {
						log.Fatalf("%s: %v", l, err)
					}
					if err := unlock(ctx); err != nil {
						log.Fatalf("%s: release: %v", l, err)
					}
					cycles.Add(1)
					cycleTimes[min(int(time.Since(start)/time.Microsecond), len(cycleTimes)-1)].Add(1)
				}
			})
		}
		wg.Wait()
		p50[l.String()] = append(p50[l.String()], medianCycle())
		return cycles.Load(), nil
	})
	fmt.Printf("## Uncontended: %d goroutines, distinct keys, acquire + release\n\n", goroutines)
	fmt.Println("vs floor: the median, over the rounds, of its cycles/s over the floor's in the same round. p50: the median, over the rounds, of a turn's median cycle.")
	fmt.Println()
	fmt.Println("| implementation | cycles/s | vs floor | p50 cycle µs | round trips/cycle | socket writes/cycle | Redis commands/cycle | allocs/cycle |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	floor := all["go-redis-floor"]
	for _, name := range names() {
		s := all[name]
		if s == nil {
			continue
		}
		rel := "-"
		if floor != nil {
			var ratios []float64
			for r := range s.perTurn {
				ratios = append(ratios, s.perTurn[r]/floor.perTurn[r])
			}
			slices.Sort(ratios)
			rel = fmt.Sprintf("%.2f", ratios[len(ratios)/2])
		}
		fmt.Printf("| %s | %.0f | %s | %.0f | %.2f | %.2f | %.2f | %.1f |\n", name, s.perSec(), rel, median(p50[name]).Seconds()*1e6,
			s.per(s.trips), s.per(s.writes), s.per(s.calls), s.per(int64(s.allocs)))
	}
	fmt.Println()
}

// medianCycle is the median cycle time that cycleTimes counted.
func medianCycle() time.Duration {
	var total int64
	for i := range cycleTimes {
		total += cycleTimes[i].Load()
	}
	var seen int64
	for i := range cycleTimes {
		seen += cycleTimes[i].Load()
		if seen*2 >= total {
			return time.Duration(i) * time.Microsecond
		}
	}
	return 0
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds[len(ds)/2]
}
