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
	"github.com/padlock-go/padlock/internal/fipsoff"
)

// runMiniredis starts an in-process miniredis (outside Go's strict FIPS
// mode: see unenforced).
func runMiniredis() *miniredis.Miniredis {
	var mr *miniredis.Miniredis
	var err error
	fipsoff.Run(func() { mr, err = miniredis.Run() })
	if err != nil {
		panic(err)
	}
	return mr
}

// exampleRedis starts an in-process miniredis so the examples run
// anywhere; in a service, rdb is your usual go-redis client.
func exampleRedis() (*redis.Client, func()) {
	mr := runMiniredis()
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

// An instance shuts down while a request waits for a lock that another
// instance holds: Close ends the wait with ErrClosed and takes the waiter
// out of the lock's queue in Redis before it returns, so the go-redis
// client is closed after it, and the next release serves the waiters that
// are left.
func ExampleClient_Close() {
	mr := runMiniredis()
	defer mr.Close()
	ctx := context.Background()
	otherRdb := redis.NewClient(&redis.Options{Addr: mr.Addr()}) // another instance's
	defer otherRdb.Close()
	other := padlock.New(otherRdb)
	defer other.Close()
	held, _ := other.TryAcquire(ctx, "lock:import", time.Minute)

	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	locks := padlock.New(rdb)
	waiting := make(chan struct{})
	result := make(chan error)
	go func() {
		_, err := locks.Acquire(ctx, "lock:import", time.Minute, padlock.WithObserver(&padlock.Observer{
			WaitStart: func(context.Context, string) { close(waiting) },
		}))
		result <- err
	}()
	<-waiting

	// Shutting down: first the locks, then the go-redis client.
	_ = locks.Close()
	_ = rdb.Close()
	fmt.Println("the request's Acquire:", errors.Is(<-result, padlock.ErrClosed))
	info, _ := other.Inspect(ctx, "lock:import")
	fmt.Println("waiting in Redis:", info.Waiting)
	_ = held.Release(ctx)
	// Output:
	// the request's Acquire: true
	// waiting in Redis: 0
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
	const write = `
local last = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if tonumber(ARGV[1]) < last then return 0 end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
return 1`

	paused, _ := locks.TryAcquire(ctx, "lock:invoice:7", time.Second)
	_ = rdb.Del(ctx, "lock:invoice:7") // stands for: paused past its ttl, the lock expired
	next, _ := locks.TryAcquire(ctx, "lock:invoice:7", time.Second)

	ok, _ := rdb.Eval(ctx, write, []string{"invoice:7"}, next.Fence(), "paid").Bool()
	fmt.Println("new holder's write applied:", ok)
	ok, _ = rdb.Eval(ctx, write, []string{"invoice:7"}, paused.Fence(), "unpaid").Bool()
	fmt.Println("paused holder's write applied:", ok)
	fmt.Println("invoice:", rdb.HGet(ctx, "invoice:7", "value").Val())
	// Output:
	// new holder's write applied: true
	// paused holder's write applied: false
	// invoice: paid
}

// Fail closed or fail open. padlock tells contention (ErrNotAcquired:
// another instance runs the job) from an outage (any other error: Redis
// could not be asked). What to do in an outage is the caller's choice:
// failing closed never runs the job twice but skips it while Redis is down;
// failing open keeps the job running but may run it on every instance at
// once, so it suits only jobs that are safe to duplicate (idempotent ones,
// see Example_idempotency).
func Example_failClosedOrOpen() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()

	// runExclusive runs job on one instance at a time; failOpen says what to
	// do when Redis cannot be reached.
	runExclusive := func(locks *padlock.Client, failOpen bool, job func()) {
		lock, err := locks.TryAcquire(ctx, "lock:cleanup", time.Minute)
		switch {
		case errors.Is(err, padlock.ErrNotAcquired):
			fmt.Println("another instance is running it: skipped")
			return
		case err != nil && failOpen:
			fmt.Println("Redis unreachable: running without the lock")
			job()
			return
		case err != nil:
			fmt.Println("Redis unreachable: skipped (fail closed)")
			return
		}
		defer lock.Release(ctx)
		job()
	}
	job := func() { fmt.Println("cleaning up") }

	locks := padlock.New(rdb)
	held, _ := locks.TryAcquire(ctx, "lock:cleanup", time.Minute) // another instance's
	runExclusive(locks, false, job)
	_ = held.Release(ctx)
	runExclusive(locks, false, job)

	// A Redis nobody listens on: an outage, not contention.
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer down.Close()
	runExclusive(padlock.New(down), false, job)
	runExclusive(padlock.New(down), true, job)
	// Output:
	// another instance is running it: skipped
	// cleaning up
	// Redis unreachable: skipped (fail closed)
	// Redis unreachable: running without the lock
	// cleaning up
}

// Locks with idempotency. A lock makes instances take turns; it cannot by
// itself make a job happen once: a lock can expire half-way through a job
// (a long pause), and a failover can hand it to two instances. So the job
// also records its completion, in the same transaction as its effect, and
// checks the record first. Run twice, it has its effect once.
func Example_idempotency() {
	mr := runMiniredis()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locks := padlock.New(rdb)
	ctx := context.Background()

	// The storage: the completion record is checked and written in the
	// same transaction as the effect (WATCH and MULTI in Redis here; a SQL
	// transaction or a unique key elsewhere), so two runs cannot both pass
	// the check.
	charge := func(jobID string) (charged bool, err error) {
		record := "done:" + jobID
		err = rdb.Watch(ctx, func(tx *redis.Tx) error {
			if n, err := tx.Exists(ctx, record).Result(); err != nil || n == 1 {
				return err // completed before: nothing to do
			}
			_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.IncrBy(ctx, "charged:customer:7", 100)
				p.Set(ctx, record, "1", 0)
				return nil
			})
			charged = err == nil
			return err
		}, record)
		return charged, err
	}
	runJob := func(instance, jobID string) {
		err := locks.TryDo(ctx, "lock:job:"+jobID, time.Minute, func(ctx context.Context) error {
			charged, err := charge(jobID)
			switch {
			case err != nil:
				return err
			case charged:
				fmt.Println(instance, "charged the customer")
			default:
				fmt.Println(instance, "found the job done")
			}
			return nil
		})
		if errors.Is(err, padlock.ErrNotAcquired) {
			fmt.Println(instance, "skipped: another instance has the job")
		}
	}

	runJob("instance 1", "invoice-42")
	// The same job is delivered again, to another instance (a retry, a
	// second cron host, a holder whose lock expired half-way).
	runJob("instance 2", "invoice-42")
	fmt.Println("charged:", rdb.Get(ctx, "charged:customer:7").Val())
	// Output:
	// instance 1 charged the customer
	// instance 2 found the job done
	// charged: 100
}

// At most 2 exports against a partner's API at once, across every
// instance: a semaphore of 2 places. A third export waits (Do) or is
// refused (TryDo) while both places are taken.
func ExampleWithLimit() {
	rdb, stop := exampleRedis()
	defer stop()
	locks := padlock.New(rdb)
	ctx := context.Background()
	two := padlock.WithLimit(2)

	first, _ := locks.TryAcquire(ctx, "lock:exports:partner", time.Minute, two, padlock.WithMetadata("export 1"))
	second, _ := locks.TryAcquire(ctx, "lock:exports:partner", time.Minute, two, padlock.WithMetadata("export 2"))
	err := locks.TryDo(ctx, "lock:exports:partner", time.Minute, func(context.Context) error {
		return nil // export 3
	}, two)
	fmt.Println("a third export:", errors.Is(err, padlock.ErrNotAcquired))

	info, _ := locks.Inspect(ctx, "lock:exports:partner")
	fmt.Println(info.Kind, "with", len(info.Holders), "holders")

	_ = first.Release(ctx) // a place frees up
	err = locks.TryDo(ctx, "lock:exports:partner", time.Minute, func(context.Context) error {
		fmt.Println("exporting")
		return nil
	}, two)
	fmt.Println("a third export, later:", err)
	_ = second.Release(ctx)
	// Output:
	// a third export: true
	// semaphore with 2 holders
	// exporting
	// a third export, later: <nil>
}

// A config document read by every instance and rewritten by one: readers
// take shared holds, any number at once; the writer takes the ordinary,
// exclusive lock, which waits for the readers (and, once it waits, new
// readers wait behind it).
func ExampleWithShared() {
	rdb, stop := exampleRedis()
	defer stop()
	locks := padlock.New(rdb)
	ctx := context.Background()

	reader1, _ := locks.TryAcquire(ctx, "lock:config", time.Minute, padlock.WithShared())
	reader2, err := locks.TryAcquire(ctx, "lock:config", time.Minute, padlock.WithShared())
	fmt.Println("two readers at once:", err == nil)

	_, err = locks.TryAcquire(ctx, "lock:config", time.Minute) // the writer
	fmt.Println("writer while they read:", errors.Is(err, padlock.ErrNotAcquired))

	_ = reader1.Release(ctx)
	_ = reader2.Release(ctx)
	err = locks.TryDo(ctx, "lock:config", time.Minute, func(context.Context) error {
		fmt.Println("rewriting the config")
		return nil
	})
	fmt.Println("writer after they left:", err)
	// Output:
	// two readers at once: true
	// writer while they read: true
	// rewriting the config
	// writer after they left: <nil>
}

// A preflight before deploying: is this Redis safe for locks? Check reads
// each node's settings, probes the user's permissions and runs a full lock
// cycle; anything of severity Danger can lose a lock silently.
func ExampleClient_Check() {
	rdb, stop := exampleRedis()
	defer stop()
	locks := padlock.New(rdb)

	report, err := locks.Check(context.Background(), "lock:padlock-doctor")
	if err != nil {
		fmt.Println("Redis cannot be reached:", err)
		return
	}
	fmt.Print("cycle:")
	for _, s := range report.Cycle {
		if s.Err != nil {
			fmt.Print(" ", s.Name, " FAILED: ", s.Err)
			break
		}
		fmt.Print(" ", s.Name)
	}
	fmt.Println()
	for _, f := range report.Findings { // most severe first
		fmt.Printf("%s [%s]: %s\n", f.Severity, f.Topic, f.Problem)
	}
	fmt.Println("safe for locks:", !report.HasDanger())
	// (miniredis answers INFO with almost nothing, so its settings are not
	// checked; on a real Redis, each node's are.)

	// Output:
	// cycle: inspect acquire extend ttl wait fence release inspect
	// info [server]: a test server in this process (miniredis, as padlocktest and padlock demo run): its locks are for tests; its settings are not checked
	// safe for locks: true
}

// An API handler takes a lock for an order and queues the work; a worker
// in another process, given the key and the token, picks the lock up and
// releases it when the work is done.
func ExampleClient_Resume() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()

	api := padlock.New(rdb)
	l, err := api.TryAcquire(ctx, "order:42", time.Minute, padlock.WithFencing())
	if err != nil {
		panic(err)
	}
	job := struct{ Key, Token string }{l.Key(), l.Token()} // sent with the job

	worker := padlock.New(rdb) // in the worker's process
	resumed, err := worker.Resume(ctx, job.Key, job.Token, padlock.WithFencing())
	if err != nil {
		panic(err)
	}
	fmt.Println("worker holds the lock, fence", resumed.Fence())
	fmt.Println("release:", resumed.Release(ctx))

	_, err = worker.Resume(ctx, job.Key, job.Token)
	fmt.Println("resumed again:", errors.Is(err, padlock.ErrNotHeld))
	// Output:
	// worker holds the lock, fence 1
	// release: <nil>
	// resumed again: true
}

// A job whose id is its token takes its lock again after a restart,
// instead of waiting for its own lock to expire.
func ExampleWithToken() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()

	first := padlock.New(rdb)
	if _, err := first.TryAcquire(ctx, "migration", time.Hour, padlock.WithToken("migrate-2026-12-01")); err != nil {
		panic(err)
	}
	// The process dies and starts again.
	restarted := padlock.New(rdb)
	l, err := restarted.TryAcquire(ctx, "migration", time.Hour, padlock.WithToken("migrate-2026-12-01"))
	fmt.Println("taken again:", err == nil, l.Token())

	_, err = restarted.TryAcquire(ctx, "migration", time.Hour, padlock.WithToken("migrate-2026-12-02"))
	fmt.Println("another job:", errors.Is(err, padlock.ErrNotAcquired))
	// Output:
	// taken again: true migrate-2026-12-01
	// another job: true
}

// An operator ends a lock whose holder hangs: Break returns what it broke
// and advances the fencing counter, so storage that checks fences rejects
// the stuck holder's late writes once the next holder has written.
func ExampleClient_Break() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	locks := padlock.New(rdb)

	stuck, err := locks.TryAcquire(ctx, "report", time.Hour, padlock.WithFencing(), padlock.WithMetadata("host=web-3"))
	if err != nil {
		panic(err)
	}
	info, err := locks.Break(ctx, "report")
	if err != nil {
		panic(err)
	}
	fmt.Println("broke:", info.Metadata, "fence", info.Fence)

	next, err := locks.TryAcquire(ctx, "report", time.Minute, padlock.WithFencing())
	if err != nil {
		panic(err)
	}
	fmt.Println("next fence:", next.Fence())
	fmt.Println("stuck holder:", errors.Is(stuck.Extend(ctx, time.Minute), padlock.ErrNotHeld))
	// Output:
	// broke: host=web-3 fence 1
	// next fence: 3
	// stuck holder: true
}

// Two instances run the same scheduler under Lead; one leads. When its
// work is done it returns, Lead resigns, and the other leads at once with
// a higher term.
func ExampleClient_Lead() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	web1, web2 := padlock.New(rdb), padlock.New(rdb)
	defer web1.Close()
	defer web2.Close()

	var order []string
	var mu sync.Mutex
	leading := make(chan string, 2)
	run := func(c *padlock.Client, host string, done *sync.WaitGroup) {
		defer done.Done()
		_ = c.Lead(ctx, "lead:scheduler", 10*time.Second, host, func(ctx context.Context) error {
			info, _ := c.Leader(ctx, "lead:scheduler")
			mu.Lock()
			order = append(order, fmt.Sprintf("%s leads in term %d", info.Value, info.Term))
			mu.Unlock()
			leading <- host
			time.Sleep(50 * time.Millisecond) // the scheduler's work
			return nil                        // done: resign
		})
	}
	var done sync.WaitGroup
	done.Add(2)
	go run(web1, "web-1", &done)
	<-leading // web-1 leads; web-2 campaigns, and waits
	go run(web2, "web-2", &done)
	done.Wait()
	for _, line := range order {
		fmt.Println(line)
	}
	_, err := web1.Leader(ctx, "lead:scheduler")
	fmt.Println(errors.Is(err, padlock.ErrNoLeader))
	// Output:
	// web-1 leads in term 1
	// web-2 leads in term 2
	// true
}

// A cap on how long a lease is kept alive: a job that hangs cannot hold the
// lock forever. Here the job never ends by itself; 200ms after the lock was
// taken, renewing stops, the lock expires at its ttl, and the job's
// context ends with ErrMaxHold (and ErrLost).
func ExampleWithMaxHold() {
	rdb, stop := exampleRedis()
	defer stop()
	locks := padlock.New(rdb)
	defer locks.Close()

	err := locks.TryDo(context.Background(), "lock:sync", 100*time.Millisecond, func(ctx context.Context) error {
		<-ctx.Done() // stands for work that hangs
		return context.Cause(ctx)
	}, padlock.WithMaxHold(200*time.Millisecond))
	fmt.Println("lost:", errors.Is(err, padlock.ErrLost))
	fmt.Println("held for its maximum:", errors.Is(err, padlock.ErrMaxHold))
	// Output:
	// lost: true
	// held for its maximum: true
}

// At most once per interval: every instance runs TryDo on its own tick,
// and the job runs on one of them once a day. The release at the end of
// the first run leaves the lock held until 23 hours after it was taken,
// so the ticks in between find it held.
func ExampleWithMinHold() {
	rdb, stop := exampleRedis()
	defer stop()
	locks := padlock.New(rdb)
	defer locks.Close()

	report := func(context.Context) error {
		fmt.Println("report sent")
		return nil
	}
	for tick := range 3 { // stands for an hourly tick on several instances
		err := locks.TryDo(context.Background(), "lock:report", 10*time.Minute, report, padlock.WithMinHold(23*time.Hour))
		if errors.Is(err, padlock.ErrNotAcquired) {
			fmt.Println("tick", tick, "skipped: already done today")
		}
	}
	// Output:
	// report sent
	// tick 1 skipped: already done today
	// tick 2 skipped: already done today
}
