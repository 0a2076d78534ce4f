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

	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock"
)

// Scenarios of waiting that only padlock has: many waiters on one key,
// many processes, readers and writers, and waiting that costs nothing
// while nothing happens.

// counts are what a counter and the server have counted so far.
type counts struct{ trips, writes, calls int64 }

// snapshot is what cnt and the server (asked through admin) have counted.
func snapshot(cnt *counter, admin *redis.Client) counts {
	return counts{cnt.trips.Load(), cnt.writes.Load(), serverCalls(admin)}
}

// turnLoop runs goroutines that take turns on key through c, each
// waiting, holding it for holdFor and releasing it, until stop, when the
// ones still waiting give up. It counts what happens in the window from
// from to to, in the steady state: the cycles released in it, the waits
// of the acquires in it, and what snap counts (round trips, writes,
// commands), the difference of a snap at from and one at to.
func turnLoop(c *padlock.Client, key string, goroutines int, from, to, stop time.Time, snap func() counts) (cycles int64, counted counts, waits []time.Duration) {
	var (
		mu  sync.Mutex
		n   atomic.Int64
		wg  sync.WaitGroup
		got = make(chan struct{})
	)
	go func() {
		time.Sleep(time.Until(from))
		c0 := snap()
		time.Sleep(time.Until(to))
		c1 := snap()
		counted = counts{c1.trips - c0.trips, c1.writes - c0.writes, c1.calls - c0.calls}
		close(got)
	}()
	for range goroutines {
		wg.Go(func() {
			var mine []time.Duration
			for time.Now().Before(stop) {
				ctx, cancel := context.WithDeadline(context.Background(), stop)
				start := time.Now()
				lk, err := c.Acquire(ctx, key, lockTTL)
				cancel()
				if err != nil {
					break // the run is over
				}
				if now := time.Now(); now.After(from) && now.Before(to) {
					mine = append(mine, now.Sub(start))
				}
				time.Sleep(holdFor)
				if err := lk.Release(context.Background()); err != nil {
					log.Fatalf("padlock: release: %v", err)
				}
				if now := time.Now(); now.After(from) && now.Before(to) {
					n.Add(1)
				}
			}
			mu.Lock()
			waits = append(waits, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	<-got
	return n.Load(), counted, waits
}

// manyWaiters: one Client, one key, 2ms hold, 16 and then 512 goroutines,
// alternating in rounds, on each driver: a hand-off should cost the same
// however many wait. Each turn is measured after its first third (when
// every goroutine has come) and until a little before its end (when the
// ones still waiting give up).
func manyWaiters(addr string) {
	sizes := []int{16, 512}
	drivers := padlockDrivers()
	all := map[string]map[int]*stats{}
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	for range *rounds {
		for _, drv := range drivers {
			if all[drv.name] == nil {
				all[drv.name] = map[int]*stats{}
			}
			for _, n := range sizes {
				s := all[drv.name][n]
				if s == nil {
					s = &stats{}
					all[drv.name][n] = s
				}
				waitersTurn(addr, admin, drv, n, s)
			}
		}
	}
	fmt.Printf("## Many waiters: one Client, one key, %v hold, 16 against 512 goroutines\n\n", holdFor)
	fmt.Println("Measured in the steady state (from a third into each turn to its end). FIFO ideal wait = goroutines / cycles per second.")
	fmt.Println()
	fmt.Println("| driver | goroutines | cycles/s | vs 16 | round trips/handoff | socket writes/handoff | Redis commands/handoff | p50 wait ms | p99 wait ms | FIFO ideal ms | p99 / ideal |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, drv := range drivers {
		for _, n := range sizes {
			s, s16 := all[drv.name][n], all[drv.name][16]
			ideal := time.Duration(float64(n) / s.perSec() * float64(time.Second))
			fmt.Printf("| %s | %d | %.0f | %.2f | %.2f | %.2f | %.2f | %s | %s | %s | %.2f |\n", drv.name, n, s.perSec(), s.perSec()/s16.perSec(),
				s.per(s.trips), s.per(s.writes), s.per(s.calls), ms(s.pct(0.5)), ms(s.pct(0.99)), ms(ideal), float64(s.pct(0.99))/float64(ideal))
		}
	}
	fmt.Println()
}

// waitersTurn is one turn of manyWaiters: n goroutines of one Client of
// drv, added to s.
func waitersTurn(addr string, admin *redis.Client, drv padlockDriver, n int, s *stats) {
	c, cnt, closeAll := drv.open(addr)
	defer closeAll()
	d := *duration / time.Duration(*rounds)
	start := time.Now()
	from, to, stop := start.Add(d/3), start.Add(d-50*time.Millisecond), start.Add(d)
	cycles, counted, waits := turnLoop(c, "bench:waiters", n, from, to, stop, func() counts { return snapshot(cnt, admin) })
	s.elapsed += to.Sub(from)
	s.cycles += cycles
	s.trips += counted.trips
	s.writes += counted.writes
	s.calls += counted.calls - 1 // not the INFO itself
	s.waits = append(s.waits, waits...)
}

// procs8: 8 processes of 32 goroutines take turns on one key.
func procs8(addr string) {
	const processes, goroutines = 8, 32
	var list []impl
	for _, im := range impls() {
		if im.name == "padlock" {
			list = append(list, im)
		}
	}
	s := procsRun(addr, processes, goroutines, list)["padlock"]
	ideal := time.Duration(float64(processes*goroutines) / s.perSec() * float64(time.Second))
	fmt.Printf("## Many processes: %d processes x %d goroutines, one key, %v hold\n\n", processes, goroutines, holdFor)
	fmt.Println("| implementation | cycles/s | p50 wait ms | p99 wait ms | FIFO ideal ms | p99 / ideal |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: |")
	fmt.Printf("| padlock | %.0f | %s | %s | %s | %.2f |\n\n", s.perSec(), ms(s.pct(0.5)), ms(s.pct(0.99)), ms(ideal), float64(s.pct(0.99))/float64(ideal))
}

// readersWriters: 12 goroutines take shared holds and 4 the exclusive
// lock of one key, 2ms each, in one Client, for 4 seconds (or -duration,
// if longer).
func readersWriters(addr string) {
	const readers, writers = 12, 4
	d := max(4*time.Second, *duration/time.Duration(*rounds))
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64})
	defer rdb.Close()
	c := padlock.New(rdb)
	defer c.Close()
	var (
		mu              sync.Mutex
		reading, writes int
		overlaps        int
		waits           = map[bool][]time.Duration{}
		cycles          = map[bool]int64{}
		wg              sync.WaitGroup
	)
	stop := time.Now().Add(d)
	for g := range readers + writers {
		shared := g < readers
		wg.Go(func() {
			var opts []padlock.Option
			if shared {
				opts = append(opts, padlock.WithShared())
			}
			for time.Now().Before(stop) {
				ctx, cancel := context.WithDeadline(context.Background(), stop)
				start := time.Now()
				l, err := c.Acquire(ctx, "bench:rw", lockTTL, opts...)
				cancel()
				if err != nil {
					mu.Lock()
					waits[shared] = append(waits[shared], time.Since(start)) // still waiting at the end
					mu.Unlock()
					return
				}
				mu.Lock()
				waits[shared] = append(waits[shared], time.Since(start))
				if shared {
					reading++
				} else {
					writes++
				}
				if writes > 1 || writes == 1 && reading > 0 {
					overlaps++
				}
				mu.Unlock()
				time.Sleep(holdFor)
				mu.Lock()
				if shared {
					reading--
				} else {
					writes--
				}
				mu.Unlock()
				if err := l.Release(context.Background()); err != nil {
					log.Fatalf("rw: release: %v", err)
				}
				mu.Lock()
				cycles[shared]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	fmt.Printf("## Readers and writers: %d goroutines take shared holds and %d the lock, one key, %v hold, %v\n\n", readers, writers, holdFor, d)
	fmt.Println("| kind | goroutines | cycles | cycles/s | p50 wait ms | p99 wait ms | longest wait ms |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, kind := range []struct {
		name   string
		shared bool
		n      int
	}{{"shared (readers)", true, readers}, {"exclusive (writers)", false, writers}} {
		w := waits[kind.shared]
		slices.Sort(w)
		fmt.Printf("| %s | %d | %d | %.0f | %s | %s | %s |\n", kind.name, kind.n, cycles[kind.shared], float64(cycles[kind.shared])/d.Seconds(),
			ms(w[len(w)/2]), ms(w[min(len(w)-1, len(w)*99/100)]), ms(w[len(w)-1]))
	}
	fmt.Printf("\nA reader beside a writer, or two writers: %d times.\n\n", overlaps)
}

// idle: on each driver, 1,000 goroutines of one Client wait on 1,000 keys
// held by another Client (on go-redis), ttl 1 minute, while nothing
// happens; then the keys are deleted by hand (a plain DEL).
func idle(addr string) {
	const n, window = 1000, 10 * time.Second
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	type row struct {
		name    string
		counted counts
		served  time.Duration
	}
	var rows []row
	for _, drv := range padlockDrivers() {
		counted, served := idleRun(addr, admin, drv, n, window)
		rows = append(rows, row{drv.name, counted, served})
	}
	fmt.Printf("## Idle waiting: %d goroutines of one Client wait on %d keys held by another Client (ttl %v), while nothing happens, for %v\n\n",
		n, n, time.Minute, window)
	fmt.Println("| driver (waiting Client) | round trips/s (waiting Client) | socket writes/s (waiting Client) | Redis commands/s | all served after a plain DEL of every key |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: |")
	for _, r := range rows {
		fmt.Printf("| %s | %.1f | %.1f | %.0f | %s (%d of %d) |\n", r.name, float64(r.counted.trips)/window.Seconds(),
			float64(r.counted.writes)/window.Seconds(), float64(r.counted.calls)/window.Seconds(), r.served.Round(time.Millisecond), n, n)
	}
	fmt.Println()
}

// idleRun is idle on one driver: n waiters of a Client of drv on n keys
// held by a go-redis Client. It returns what the waiting Client and the
// server counted in window, and the time from the DEL of every key until
// every waiter was served.
func idleRun(addr string, admin *redis.Client, drv padlockDriver, n int, window time.Duration) (counts, time.Duration) {
	const ttl = time.Minute
	ctx := context.Background()
	holders, _, closeHolders := openGoRedis(addr)
	defer closeHolders()
	waiters, cnt, closeWaiters := drv.open(addr)
	defer closeWaiters()

	keys := make([]string, n)
	for i := range keys {
		keys[i] = "bench:idle:" + strconv.Itoa(i)
		if _, err := holders.TryAcquire(ctx, keys[i], ttl); err != nil {
			log.Fatal(err)
		}
	}
	got := make(chan *padlock.Lock, n)
	wctx, cancel := context.WithTimeout(ctx, 2*ttl)
	defer cancel()
	for _, key := range keys {
		go func() {
			l, err := waiters.Acquire(wctx, key, ttl)
			if err != nil {
				log.Fatalf("idle: %v", err)
			}
			got <- l
		}()
	}
	untilQueued(holders, keys)
	time.Sleep(time.Second) // the first attempts and subscriptions are over
	c0 := snapshot(cnt, admin)
	time.Sleep(window)
	c1 := snapshot(cnt, admin)
	// Then an operator deletes every key by hand (a plain DEL, no release
	// announced): Redis is the truth, and the tickets' renewals see it.
	released := time.Now()
	if err := admin.Del(ctx, keys...).Err(); err != nil {
		log.Fatal(err)
	}
	for range n {
		l := <-got
		if err := l.Release(ctx); err != nil {
			log.Fatal(err)
		}
	}
	served := time.Since(released)
	return counts{c1.trips - c0.trips, c1.writes - c0.writes, c1.calls - c0.calls - 1}, served
}

// untilQueued returns once every key has a waiter queued in Redis.
func untilQueued(c *padlock.Client, keys []string) {
	for {
		queued := 0
		for _, key := range keys {
			info, err := c.Inspect(context.Background(), key)
			if err != nil {
				log.Fatal(err)
			}
			queued += info.Waiting
		}
		if queued == len(keys) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}
