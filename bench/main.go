// Command bench measures padlock side by side with github.com/bsm/redislock,
// github.com/go-redsync/redsync, github.com/redis/rueidis/rueidislock (with
// its defaults, "rueidislock", and with one key and NOLOOP tracking as its
// README has it, "rueidislock-km1") and a hand-written go-redis lock (the
// floor), on one real redis-server that it starts on a loopback port.
// padlock runs on each of its drivers: go-redis (padlock.New, "padlock"),
// rueidis (padlockrueidis.New, "padlock-rueidis") and valkey-go
// (padlockvalkey.New, "padlock-valkey").
//
//	cd bench && go run . [-duration 3s] [-rounds 3] [-scenario all] [-impl name]
//
// Scenarios: uncontended (8 goroutines, distinct keys; lone: 1; many: 64
// and 256), contended (16 goroutines, one key, 2ms hold) and procs (4
// processes x 4 goroutines, one key, 2ms hold). In each of these the
// implementations take turns, in rounds, so that a noisy neighbour hurts
// them alike. Peers that cannot be woken on release poll every 10ms while
// they wait (rueidislock is woken by client-side caching's
// invalidations). held: each implementation in turn holds one key while
// nothing else happens, for 8.5s (what that costs Redis from 5.5s after
// the take, past rueidislock's first renewal). Then padlock alone
// (no peer has these), on each driver: waiters (16 against 512 goroutines
// on one key), leases (10,000 locks kept alive) and idle (1,000 waiters
// that wait for a minute); and on go-redis: semaphore (16 goroutines, 4
// places), procs8 (8 processes x 32 goroutines) and rw (12 readers and 4
// writers of one key); list (Locks over 10,000 locks among 100,000
// other keys, on the server and on a Cluster of three masters).
//
// Round trips are the commands and pipelines callers send and wait for;
// socket writes are the writes on the client's connections, fewer than
// the round trips where rueidis and valkey-go send concurrent callers'
// commands together; Redis commands are counted by the server (INFO
// commandstats). See counter.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/redistest"
)

var (
	duration = flag.Duration("duration", 3*time.Second, "time each implementation runs in each scenario, over all rounds")
	rounds   = flag.Int("rounds", 3, "turns each implementation takes per scenario")
	scenario = flag.String("scenario", "all", "uncontended, lone, many, contended, held, procs, leases, semaphore, waiters, procs8, rw, idle, list, free, or all")
	ways     = flag.String("ways", "", "free: run only these ways of freeing a key, a comma-separated list (crash, DEL, UNLINK, FLUSHALL, eviction, overwrite, release)")
	only     = flag.String("impl", "", "run only these implementations, a comma-separated list (padlock, padlock-rueidis, padlock-valkey, rueidislock, rueidislock-km1, redislock, redsync, go-redis-floor)")

	// Flags for the child processes of the procs scenario.
	child        = flag.Bool("child", false, "internal: run as a child of the procs scenario")
	childAddr    = flag.String("addr", "", "internal: redis address")
	cpuProfile   = flag.String("cpuprofile", "", "write a CPU profile of the run to this file")
	mutexProfile = flag.String("mutexprofile", "", "write a mutex contention profile of the run to this file")
	blockProfile = flag.String("blockprofile", "", "write a blocking profile of the run to this file")
	memProfile   = flag.String("memprofile", "", "write an allocation profile of the run to this file")
	childStart   = flag.Int64("start", 0, "internal: start time, unix nanoseconds")
	childGor     = flag.Int("goroutines", 4, "internal: goroutines")
)

const (
	holdFor   = 2 * time.Millisecond
	lockTTL   = 10 * time.Second
	pollEvery = 10 * time.Millisecond
)

func main() {
	flag.Parse()
	redis.SetLogger(quiet{})
	if *child {
		runChild()
		return
	}
	defer profile()()
	env := &benchEnv{}
	defer env.cleanup()
	srv := redistest.Start(env)
	fmt.Printf("redis-server on %s; %d CPUs; %v per implementation per scenario in %d rounds\n\n",
		srv.Addr(), runtime.NumCPU(), *duration, *rounds)

	run := func(name string, f func(addr string)) {
		if *scenario == "all" || *scenario == name {
			f(srv.Addr())
		}
	}
	run("uncontended", uncontended)
	run("lone", lone)
	run("many", many)
	run("contended", contended)
	run("held", held)
	run("procs", procs)
	run("leases", leases)
	run("semaphore", semaphore)
	run("waiters", manyWaiters)
	run("procs8", procs8)
	run("rw", readersWriters)
	run("idle", idle)
	run("list", list)
	run("free", free)
}

// semaphore: 16 goroutines take turns in the 4 places of a padlock
// semaphore, holding each for holdFor.
func semaphore(addr string) {
	const goroutines, places = 16, 4
	s := &stats{}
	for range *rounds {
		rdb, cnt := countedClient(addr)
		l := padlockSemaphore{padlock.New(rdb), places}
		start := time.Now()
		cycles, waits := holdLoop(l, "bench:semaphore", goroutines, start.Add(*duration/time.Duration(*rounds)))
		s.elapsed += time.Since(start)
		s.cycles += cycles
		s.trips += cnt.trips.Load()
		s.waits = append(s.waits, waits...)
		l.close()
		_ = rdb.Close()
	}
	ideal := time.Duration(float64(goroutines) / s.perSec() * float64(time.Second))
	fmt.Printf("## Semaphore: %d goroutines, %d places, %v hold\n\n", goroutines, places, holdFor)
	fmt.Printf("The physical limit is %d places x 1/%v = %.0f cycles/s. FIFO ideal wait = goroutines / cycles per second.\n\n",
		places, holdFor, float64(places)/holdFor.Seconds())
	fmt.Println("| implementation | cycles/s | round trips/cycle | p50 wait ms | p99 wait ms | FIFO ideal ms | p99 / ideal |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
	fmt.Printf("| %s | %.0f | %.2f | %s | %s | %s | %.2f |\n\n", "padlock WithLimit(4)", s.perSec(), s.per(s.trips),
		ms(s.pct(0.5)), ms(s.pct(0.99)), ms(ideal), float64(s.pct(0.99))/float64(ideal))
}

// profile starts the profiles the flags ask for, and returns what writes
// them at the end of the run.
func profile() func() {
	var stops []func()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		stops = append(stops, func() { pprof.StopCPUProfile(); _ = f.Close() })
	}
	write := func(name, file string) {
		if file == "" {
			return
		}
		stops = append(stops, func() {
			f, err := os.Create(file)
			if err != nil {
				log.Fatal(err)
			}
			defer f.Close()
			if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
				log.Fatal(err)
			}
		})
	}
	if *mutexProfile != "" {
		runtime.SetMutexProfileFraction(1)
	}
	if *blockProfile != "" {
		runtime.SetBlockProfileRate(1)
	}
	write("mutex", *mutexProfile)
	write("block", *blockProfile)
	write("allocs", *memProfile)
	return func() {
		for _, stop := range stops {
			stop()
		}
	}
}

// quiet is a go-redis logger that drops everything.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// benchEnv is the little of testing.T that redistest needs.
type benchEnv struct {
	cleanups []func()
	dirs     []string
}

func (e *benchEnv) Helper()                      {}
func (e *benchEnv) Cleanup(f func())             { e.cleanups = append(e.cleanups, f) }
func (e *benchEnv) Skip(args ...any)             { e.Fatalf("%s", fmt.Sprint(args...)) }
func (e *benchEnv) Fatalf(f string, args ...any) { e.cleanup(); log.Fatalf(f, args...) }
func (e *benchEnv) TempDir() string {
	d, err := os.MkdirTemp("", "padlock-bench")
	if err != nil {
		e.Fatalf("%v", err)
	}
	e.dirs = append(e.dirs, d)
	return d
}

func (e *benchEnv) cleanup() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
	e.cleanups = nil
	for _, d := range e.dirs {
		_ = os.RemoveAll(d)
	}
	e.dirs = nil
}

func mallocs() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.Mallocs
}

// stats is what one implementation did in one scenario, over its rounds.
type stats struct {
	cycles  int64
	elapsed time.Duration
	cpu     time.Duration // of the procs scenario's child processes, user and system
	perTurn []float64     // cycles/s of each round's turn (turns)
	trips   int64
	writes  int64 // socket writes
	calls   int64
	allocs  uint64
	waits   []time.Duration
}

func (s *stats) perSec() float64 { return float64(s.cycles) / s.elapsed.Seconds() }

func (s *stats) per(n int64) float64 {
	if s.cycles == 0 {
		return 0
	}
	return float64(n) / float64(s.cycles)
}

func (s *stats) pct(p float64) time.Duration {
	if len(s.waits) == 0 {
		return 0
	}
	slices.Sort(s.waits)
	return s.waits[min(len(s.waits)-1, int(p*float64(len(s.waits))))]
}

func ms(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 2, 64) }

// turns runs each implementation for duration/rounds at a time, in turn,
// rounds times, with f doing one turn, and returns their stats.
func turns(addr string, f func(l locker, d time.Duration) (cycles int64, waits []time.Duration)) map[string]*stats {
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	all := map[string]*stats{}
	for r := 0; r < *rounds; r++ {
		list := impls()
		// Rotate the order each round.
		list = append(list[r%len(list):], list[:r%len(list)]...)
		for _, im := range list {
			l, cnt := im.new(addr)
			s := all[im.name]
			if s == nil {
				s = &stats{}
				all[im.name] = s
			}
			calls0, allocs0, start := serverCalls(admin), mallocs(), time.Now()
			cnt.reset()
			cycles, waits := f(l, *duration/time.Duration(*rounds))
			s.perTurn = append(s.perTurn, float64(cycles)/time.Since(start).Seconds())
			s.elapsed += time.Since(start)
			s.allocs += mallocs() - allocs0
			s.trips += cnt.trips.Load()
			s.writes += cnt.writes.Load()
			s.calls += serverCalls(admin) - calls0 - 1 // not the INFO itself
			s.cycles += cycles
			s.waits = append(s.waits, waits...)
			l.close()
		}
	}
	return all
}

func names() []string {
	var out []string
	for _, im := range impls() {
		out = append(out, im.name)
	}
	return out
}

// holdLoop runs goroutines that each, until d has passed, wait for key,
// hold it for holdFor, and release it. It returns the cycles and the waits.
func holdLoop(l locker, key string, goroutines int, stop time.Time) (int64, []time.Duration) {
	var (
		mu     sync.Mutex
		waits  []time.Duration
		cycles atomic.Int64
		wg     sync.WaitGroup
	)
	for range goroutines {
		wg.Go(func() {
			var mine []time.Duration
			for time.Now().Before(stop) {
				ctx, cancel := context.WithDeadline(context.Background(), stop.Add(time.Second))
				start := time.Now()
				unlock, err := l.lock(ctx, key, lockTTL)
				cancel()
				if err != nil {
					break // the run is over
				}
				mine = append(mine, time.Since(start))
				time.Sleep(holdFor)
				if err := unlock(context.Background()); err != nil {
					log.Fatalf("%s: release: %v", l, err)
				}
				cycles.Add(1)
			}
			mu.Lock()
			waits = append(waits, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return cycles.Load(), waits
}

// contended: 16 goroutines in one process take turns on one key.
func contended(addr string) {
	const goroutines = 16
	all := turns(addr, func(l locker, d time.Duration) (int64, []time.Duration) {
		return holdLoop(l, "bench:contended", goroutines, time.Now().Add(d))
	})
	fmt.Printf("## Contended: %d goroutines, one key, %v hold\n\n", goroutines, holdFor)
	fmt.Println("FIFO ideal wait = goroutines / cycles per second.")
	fmt.Println()
	fmt.Println("| implementation | cycles/s | round trips/handoff | socket writes/handoff | Redis commands/handoff | allocs/handoff | p50 wait ms | p99 wait ms | FIFO ideal ms | p99 / ideal |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, name := range names() {
		s := all[name]
		if s == nil {
			continue
		}
		ideal := time.Duration(float64(goroutines) / s.perSec() * float64(time.Second))
		fmt.Printf("| %s | %.0f | %.2f | %.2f | %.2f | %.1f | %s | %s | %s | %.2f |\n", name, s.perSec(), s.per(s.trips), s.per(s.writes),
			s.per(s.calls), s.per(int64(s.allocs)), ms(s.pct(0.5)), ms(s.pct(0.99)), ms(ideal), float64(s.pct(0.99))/float64(ideal))
	}
	fmt.Println()
}

// childResult is what a procs child reports.
type childResult struct {
	Cycles int64   `json:"cycles"`
	Waits  []int64 `json:"waits_ns"`
}

// procs: 4 processes of 4 goroutines each take turns on one key.
func procs(addr string) {
	all := procsRun(addr, 4, 4, impls())
	fmt.Printf("## Contended across processes: %d processes x %d goroutines, one key, %v hold\n\n", 4, 4, holdFor)
	fmt.Println("CPU per cycle: user and system time of the 4 processes, start-up included, over their cycles.")
	fmt.Println()
	fmt.Println("| implementation | cycles/s | p50 wait ms | p99 wait ms | FIFO ideal ms | p99 / ideal | CPU µs per cycle |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, name := range names() {
		if s := all[name]; s != nil {
			ideal := time.Duration(float64(16) / s.perSec() * float64(time.Second))
			fmt.Printf("| %s | %.0f | %s | %s | %s | %.2f | %.0f |\n", name, s.perSec(), ms(s.pct(0.5)), ms(s.pct(0.99)), ms(ideal),
				float64(s.pct(0.99))/float64(ideal), s.per(s.cpu.Microseconds()))
		}
	}
	fmt.Println()
}

// procsRun runs processes child processes of goroutines goroutines each
// taking turns on one key, for each implementation of list in turn, and
// returns their stats.
func procsRun(addr string, processes, goroutines int, list []impl) map[string]*stats {
	self, err := os.Executable()
	if err != nil {
		log.Fatal(err)
	}
	all := map[string]*stats{}
	for r := 0; r < *rounds; r++ {
		list := append(list[r%len(list):], list[:r%len(list)]...)
		for _, im := range list {
			d := *duration / time.Duration(*rounds)
			start := time.Now().Add(300*time.Millisecond + time.Duration(processes)*20*time.Millisecond) // after the children are up
			outs := make([][]byte, processes)
			cpus := make([]time.Duration, processes)
			var wg sync.WaitGroup
			for p := range processes {
				wg.Go(func() {
					cmd := exec.Command(self, "-child", "-impl", im.name, "-addr", addr,
						"-start", strconv.FormatInt(start.UnixNano(), 10), "-duration", d.String(),
						"-goroutines", strconv.Itoa(goroutines))
					out, err := cmd.Output()
					if err != nil {
						log.Fatalf("child %s: %v", im.name, err)
					}
					outs[p] = out
					cpus[p] = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
				})
			}
			wg.Wait()
			s := all[im.name]
			if s == nil {
				s = &stats{}
				all[im.name] = s
			}
			s.elapsed += d
			for _, c := range cpus {
				s.cpu += c
			}
			for _, out := range outs {
				var res childResult
				if err := json.Unmarshal(out, &res); err != nil {
					log.Fatalf("child output %q: %v", out, err)
				}
				s.cycles += res.Cycles
				for _, w := range res.Waits {
					s.waits = append(s.waits, time.Duration(w))
				}
			}
		}
	}
	return all
}

func runChild() {
	var im *impl
	for _, x := range impls() {
		if x.name == *only {
			im = &x
		}
	}
	if im == nil {
		log.Fatalf("unknown -impl %q", *only)
	}
	l, _ := im.new(*childAddr)
	start := time.Unix(0, *childStart)
	time.Sleep(time.Until(start))
	cycles, waits := holdLoop(l, "bench:procs", *childGor, start.Add(*duration))
	res := childResult{Cycles: cycles}
	for _, w := range waits {
		res.Waits = append(res.Waits, int64(w))
	}
	l.close()
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		log.Fatal(err)
	}
}
