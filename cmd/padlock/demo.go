package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/fipsoff"
)

// fencedWrite stores ARGV[2] in the hash KEYS[1] if the fence ARGV[1] is
// at least the highest fence the hash has seen; it returns 1 if it wrote,
// 0 if it rejected the write as stale.
const fencedWrite = `
local last = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if tonumber(ARGV[1]) < last then return 0 end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
return 1`

// demo plays the common cases against one Redis and checks each claim it
// prints; a claim that does not hold makes it exit 1.
type demo struct {
	rdb    *redis.Client
	locks  *padlock.Client
	mr     *miniredis.Miniredis // nil against a real Redis
	out    io.Writer
	prefix string
	failed bool
}

// demoCmd is 'padlock demo'.
func demoCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	v := newVerb("demo", "padlock demo [-redis URL] [-timeout D]",
		"Plays the common cases of a distributed lock, with no Redis needed.",
		"  0      every case behaved as promised\n  1      a claim did not hold, or the embedded Redis could not start\n"+
			exitUsageHelp+exitRedisHelp, stdout, stderr)
	redisURL := v.fset.String("redis", "", "run against this Redis URL instead of an embedded miniredis")
	timeoutFlag := addTimeoutFlag(v.fset)
	if code, ok := v.parseFlags(args, ""); !ok {
		return code
	}

	d := &demo{out: stdout}
	if *redisURL == "" {
		mr := miniredis.NewMiniRedis()
		var err error
		fipsoff.Run(func() { err = mr.StartAddr("127.0.0.1:0") })
		if err != nil {
			fmt.Fprintf(stderr, "padlock demo: cannot start the embedded Redis: %v\n", err)
			return 1
		}
		defer mr.Close()
		d.mr = mr
		d.rdb = redis.NewClient(&redis.Options{Addr: mr.Addr()})
		fmt.Fprintln(stdout, "Using an embedded Redis (miniredis): no server needed. Long waits are simulated.")
	} else {
		t, err := timeout(v.fset, *timeoutFlag)
		if err != nil {
			return v.usageError("%v", err)
		}
		c := conn{url: *redisURL, timeout: t}
		rdb, err := c.dial()
		if err != nil {
			return v.usageError("%v", err)
		}
		pctx, cancel := c.call(ctx)
		err = rdb.Ping(pctx).Err()
		cancel()
		if err != nil {
			_ = rdb.Close()
			return v.fail("reach Redis", c, err)
		}
		d.rdb = rdb
		// Keys of this run's own, so as not to meet anyone's real locks.
		d.prefix = "padlock:demo:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
		fmt.Fprintf(stdout, "Using Redis at %s, keys under %s*\n", redact(*redisURL), d.prefix)
	}
	defer d.rdb.Close()
	d.locks = padlock.New(d.rdb)
	defer d.cleanup()

	for _, scene := range []func(context.Context) error{d.race, d.crash, d.lease, d.fence} {
		if err := scene(ctx); err != nil {
			fmt.Fprintf(stderr, "padlock demo: %v\n", err)
			return exitUnavailable
		}
	}
	fmt.Fprintln(stdout)
	if d.failed {
		fmt.Fprintln(stdout, "Some claims did not hold: see UNEXPECTED above.")
		return 1
	}
	fmt.Fprintln(stdout, "Every case behaved as promised.")
	return 0
}

func (d *demo) say(format string, args ...any) { fmt.Fprintf(d.out, format+"\n", args...) }

// check prints a claim with its verdict.
func (d *demo) check(ok bool, claim string) {
	if ok {
		d.say("  => %s", claim)
		return
	}
	d.failed = true
	d.say("  => UNEXPECTED: it is not true that %s", claim)
}

// jump lets d pass, as fast as the Redis allows: simulated on miniredis.
func (d *demo) jump(dur time.Duration) {
	if d.mr != nil {
		d.mr.FastForward(dur)
		return
	}
	time.Sleep(dur)
}

// elapse waits dur in real time, and keeps miniredis's clock in step.
func (d *demo) elapse(dur time.Duration) {
	time.Sleep(dur)
	if d.mr != nil {
		d.mr.FastForward(dur)
	}
}

func (d *demo) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, k := range []string{"lock:report:daily", "lock:cache:rebuild", "lock:migration", "lock:ledger", "ledger"} {
		d.rdb.Del(ctx, d.prefix+k, d.prefix+k+":{"+d.prefix+k+"}:fence")
	}
}

// race: five instances reach the daily report at once; one runs it.
func (d *demo) race(ctx context.Context) error {
	key := d.prefix + "lock:report:daily"
	d.say("\n1. Five instances reach the daily report at the same moment (TryDo %s)", key)
	var (
		mu             sync.Mutex
		ran, skipped   int
		errs           []error
		wg             sync.WaitGroup
		others         sync.WaitGroup
		reportDuration = 2 * time.Minute
	)
	others.Add(4)
	for i := 1; i <= 5; i++ {
		wg.Go(func() {
			err := d.locks.TryDo(ctx, key, reportDuration, func(context.Context) error {
				mu.Lock()
				ran++
				d.say("   instance %d: got the lock, running the report", i)
				mu.Unlock()
				others.Wait() // the report runs while the others try
				return nil
			})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, padlock.ErrNotAcquired):
				skipped++
				d.say("   instance %d: held elsewhere, skipping", i)
				others.Done()
			case err != nil:
				errs = append(errs, err)
				others.Done()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	d.check(ran == 1 && skipped == 4, fmt.Sprintf("exactly one instance ran the report (%d ran, %d skipped)", ran, skipped))
	return nil
}

// crash: a holder dies without releasing; its lock expires by its TTL.
func (d *demo) crash(ctx context.Context) error {
	key := d.prefix + "lock:cache:rebuild"
	const ttl = time.Second
	d.say("\n2. A holder crashes; its lock expires (TTL %v)", ttl)
	if _, err := d.locks.TryAcquire(ctx, key, ttl); err != nil {
		return err
	}
	d.say("   worker A: took %s, then crashed without releasing it", key)
	_, err := d.locks.TryAcquire(ctx, key, ttl)
	if err != nil && !errors.Is(err, padlock.ErrNotAcquired) {
		return err
	}
	d.say("   worker B: tries at once: %v", errString(err))
	d.check(errors.Is(err, padlock.ErrNotAcquired), "the lock still protects the resource right after the crash")
	d.jump(ttl + 100*time.Millisecond)
	d.say("   ... %v pass ...", ttl+100*time.Millisecond)
	l, err := d.locks.TryAcquire(ctx, key, ttl)
	if err != nil && !errors.Is(err, padlock.ErrNotAcquired) {
		return err
	}
	d.say("   worker B: tries again: %v", errString(err))
	d.check(err == nil, "the crashed holder's lock expired by itself and B got it")
	if l != nil {
		return l.Release(ctx)
	}
	return nil
}

// lease: a long job keeps its lease alive, and stops the moment it is lost.
func (d *demo) lease(ctx context.Context) error {
	key := d.prefix + "lock:migration"
	const ttl, step = 600 * time.Millisecond, 150 * time.Millisecond
	d.say("\n3. A long job holds a lease (TTL %v, renewed every ~%v) and stops when it is stolen", ttl, ttl/3)
	l, err := d.locks.TryAcquire(ctx, key, ttl)
	if err != nil {
		return err
	}
	defer l.Release(context.Background())
	jobCtx, stop := l.KeepAlive(ctx)
	defer stop()

	steps := 0
	for range 8 { // 1.2s: twice the TTL
		d.elapse(step)
		steps++
	}
	left, err := l.TTL(ctx)
	d.say("   migration: %d steps done in %v, lock still ours with %v left", steps, time.Duration(steps)*step, left.Round(time.Millisecond))
	d.check(err == nil && jobCtx.Err() == nil, "KeepAlive held the lock past its TTL")

	if err := d.rdb.Set(ctx, key, "operator", time.Minute).Err(); err != nil {
		return err
	}
	d.say("   operator: overwrites %s (the lease is stolen)", key)
	stolen := time.Now()
	select {
	case <-jobCtx.Done():
		d.say("   migration: stops after %v: %v", time.Since(stolen).Round(10*time.Millisecond), context.Cause(jobCtx))
	case <-time.After(5 * time.Second):
	}
	d.check(errors.Is(context.Cause(jobCtx), padlock.ErrLost), "the job's context was cancelled with ErrLost within one renewal")
	return nil
}

// fence: a paused holder's late write is rejected by storage.
func (d *demo) fence(ctx context.Context) error {
	key, store := d.prefix+"lock:ledger", d.prefix+"ledger"
	const ttl = time.Second
	d.say("\n4. A paused holder's late write is rejected by its fencing token (WithFencing)")
	write := func(who string, l *padlock.Lock) (bool, error) {
		ok, err := d.rdb.Eval(ctx, fencedWrite, []string{store}, l.Fence(), "written by "+who).Bool()
		if err != nil {
			return false, err
		}
		verdict := "accepted"
		if !ok {
			verdict = "rejected as stale"
		}
		d.say("   worker %s: writes with fence %d: %s", who, l.Fence(), verdict)
		return ok, nil
	}
	a, err := d.locks.TryAcquire(ctx, key, ttl, padlock.WithFencing())
	if err != nil {
		return err
	}
	d.say("   worker A: took %s with fence %d, then paused (GC, SIGSTOP) past its TTL", key, a.Fence())
	d.jump(ttl + 100*time.Millisecond)
	b, err := d.locks.TryAcquire(ctx, key, ttl, padlock.WithFencing())
	if err != nil {
		return err
	}
	d.say("   worker B: took %s with fence %d", key, b.Fence())
	okB, err := write("B", b)
	if err != nil {
		return err
	}
	okA, err := write("A", a)
	if err != nil {
		return err
	}
	d.check(okB && !okA, "storage kept B's write and refused the paused holder's")
	errA := a.Release(ctx)
	d.say("   worker A: Release: %v", errString(errA))
	d.check(errors.Is(errA, padlock.ErrNotHeld), "A's Release left B's lock alone")
	return b.Release(ctx)
}

func errString(err error) string {
	if err == nil {
		return "acquired"
	}
	return err.Error()
}
