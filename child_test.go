package padlock_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock"
)

// Lock holders in child processes: the test binary runs itself again with
// PADLOCK_CHILD set, so that a test can SIGSTOP, SIGCONT or kill -9 a real
// holder. The child talks to Redis at PADLOCK_CHILD_ADDR.

// fencedWrite is the fence-checking store of the fault tests: it sets the
// register KEYS[1] (a hash) to ARGV[2] if the fence ARGV[1] is at least the
// highest fence it has seen, and returns 1; otherwise it writes nothing and
// returns 0. ARGV[1] = "0" writes without a fence check.
const fencedWrite = `
local fence = tonumber(ARGV[1])
if fence > 0 then
  local last = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
  if fence < last then return 0 end
  redis.call('HSET', KEYS[1], 'fence', ARGV[1])
end
redis.call('HSET', KEYS[1], 'value', ARGV[2])
return 1`

// runChild runs the child named by mode and returns its exit status.
func runChild(mode string) int {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("PADLOCK_CHILD_ADDR"), ReadTimeout: time.Second, MaxRetries: 2})
	defer rdb.Close()
	c := padlock.New(rdb)
	defer c.Close()
	var err error
	switch mode {
	case "holder":
		err = holderChild(c, rdb)
	case "lin":
		err = linChild(c, rdb)
	case "waiter":
		err = waiterChild(c, rdb)
	default:
		err = fmt.Errorf("unknown child %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

func childEnv(name string) string { return os.Getenv("PADLOCK_CHILD_" + name) }

func childDuration(name string) time.Duration {
	d, _ := time.ParseDuration(childEnv(name))
	return d
}

// holderChild takes a fenced lock (a place of a semaphore of 1 with
// KIND=semaphore, a shared hold with KIND=shared), keeps it alive, says "lost CAUSE" when
// the lease ends, and answers commands on stdin: "write" (a fenced write of
// the register), "extend", "release", "token" (says "token T").
func holderChild(c *padlock.Client, rdb *redis.Client) error {
	ctx := context.Background()
	key, reg := childEnv("KEY"), childEnv("REG")
	opts := []padlock.Option{padlock.WithFencing()}
	switch childEnv("KIND") {
	case "semaphore":
		opts = append(opts, padlock.WithLimit(1))
	case "shared":
		opts = append(opts, padlock.WithShared())
	}
	l, err := c.TryAcquire(ctx, key, childDuration("TTL"), opts...)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	kctx, stop := l.KeepAlive(ctx)
	defer stop()
	say("acquired fence=%d", l.Fence())
	context.AfterFunc(kctx, func() { say("lost %v", context.Cause(kctx)) })
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "write":
			ok, err := rdb.Eval(ctx, fencedWrite, []string{reg}, l.Fence(), "written by the paused holder").Bool()
			say("write ok=%v err=%v", ok, err)
		case "extend":
			say("extend %v", errName(l.Extend(ctx, time.Minute)))
		case "release":
			say("release %v", errName(l.Release(ctx)))
		case "token":
			say("token %s", l.Token())
		}
	}
	return nil
}

// waiterChild waits for a fenced lock with Acquire, saying "waiting" once
// it waits and "acquired fence=N" when it has it; then it keeps it alive
// and answers "write" (a fenced write of the register) and "release".
func waiterChild(c *padlock.Client, rdb *redis.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key, reg := childEnv("KEY"), childEnv("REG")
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	saysWaiting := padlock.WithObserver(&padlock.Observer{WaitStart: func(context.Context, string) { say("waiting") }})
	l, err := c.Acquire(ctx, key, childDuration("TTL"), padlock.WithFencing(), saysWaiting)
	if err != nil {
		return err
	}
	say("acquired fence=%d", l.Fence())
	kctx, stop := l.KeepAlive(ctx)
	defer stop()
	context.AfterFunc(kctx, func() { say("lost %v", context.Cause(kctx)) })
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "write":
			ok, err := rdb.Eval(ctx, fencedWrite, []string{reg}, l.Fence(), "written by the waiter").Bool()
			say("write ok=%v err=%v", ok, err)
		case "release":
			say("release %v", errName(l.Release(ctx)))
		}
	}
	return nil
}

func errName(err error) string {
	switch {
	case err == nil:
		return "nil"
	case errors.Is(err, padlock.ErrNotHeld):
		return "ErrNotHeld"
	}
	return err.Error()
}

// child is a running child process.
type child struct {
	cmd   *exec.Cmd
	stdin interface{ Write([]byte) (int, error) }
	lines chan string
}

// startChild runs the test binary as the child mode with env (names without
// the PADLOCK_CHILD_ prefix), and collects its stdout lines.
func startChild(t *testing.T, mode string, env map[string]string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PADLOCK_CHILD="+mode)
	for k, v := range env {
		cmd.Env = append(cmd.Env, "PADLOCK_CHILD_"+k+"="+v)
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := &child{cmd: cmd, stdin: stdin, lines: make(chan string, 1<<16)}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			ch.lines <- sc.Text()
		}
		close(ch.lines)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Kill)
		_ = cmd.Wait()
	})
	return ch
}

// expect waits for the child's next line that starts with prefix.
func (ch *child) expect(t *testing.T, prefix string, limit time.Duration) string {
	t.Helper()
	timeout := time.After(limit)
	for {
		select {
		case line, ok := <-ch.lines:
			if !ok {
				t.Fatalf("child exited before saying %q", prefix)
			}
			if strings.HasPrefix(line, prefix) {
				return line
			}
		case <-timeout:
			t.Fatalf("child did not say %q within %v", prefix, limit)
		}
	}
}

func (ch *child) send(t *testing.T, command string) {
	t.Helper()
	if _, err := ch.stdin.Write([]byte(command + "\n")); err != nil {
		t.Fatal(err)
	}
}

// linOp is one operation of the linearizability workload, as a child
// reports it: a read of the register, or a write of To after reading From.
type linOp struct {
	Kind   string `json:"kind"` // "read" or "write"; for a semaphore also "acquire", "release", "end"
	Client int    `json:"client"`
	Call   int64  `json:"call"`
	Return int64  `json:"return"`
	Value  int64  `json:"value,omitempty"` // read
	From   int64  `json:"from,omitempty"`  // write
	To     int64  `json:"to,omitempty"`    // write
	Result string `json:"result,omitempty"`
	Fence  int64  `json:"fence,omitempty"` // acquire, release, end
}

// linChild runs the linearizability workload's goroutines until
// PADLOCK_CHILD_FOR has passed and it has printed PADLOCK_CHILD_MIN
// operations on the register (reads, and writes not rejected), or three
// times FOR has passed, whichever comes first: a slow machine runs longer
// rather than checking a shorter history. Each goroutine takes the lock,
// reads the register and writes it plus one with its fence (0 unfenced),
// and releases. It prints every operation as a JSON line.
func linChild(c *padlock.Client, rdb *redis.Client) error {
	key, reg := childEnv("KEY"), childEnv("REG")
	fenced := childEnv("FENCED") == "1"
	limit, _ := strconv.Atoi(childEnv("LIMIT"))
	goroutines, _ := strconv.Atoi(childEnv("GOROUTINES"))
	id, _ := strconv.Atoi(childEnv("ID"))
	ttl := childDuration("TTL")
	minOps, _ := strconv.ParseInt(childEnv("MIN"), 10, 64)
	stopAt := time.Now().Add(childDuration("FOR"))
	capAt := time.Now().Add(3 * childDuration("FOR"))
	var ops atomic.Int64
	done := func() bool {
		now := time.Now()
		return now.After(capAt) || now.After(stopAt) && ops.Load() >= minOps
	}
	var opts []padlock.Option
	if fenced {
		opts = append(opts, padlock.WithFencing())
	}
	if limit > 0 {
		opts = append(opts, padlock.WithLimit(limit))
	}
	// The semaphore's store is written without go-redis's retries: a
	// write whose reply was lost and that was sent again could find a
	// higher fence by then (another holder runs at the same time) and be
	// reported rejected although it was applied. Without retries it is
	// reported unknown.
	store := redis.NewClient(&redis.Options{Addr: os.Getenv("PADLOCK_CHILD_ADDR"), ReadTimeout: time.Second, MaxRetries: -1})
	defer store.Close()
	var mu sync.Mutex
	out := json.NewEncoder(os.Stdout)
	emit := func(op linOp) {
		if op.Kind == "read" || op.Kind == "write" && op.Result != "rejected" {
			ops.Add(1)
		}
		mu.Lock()
		defer mu.Unlock()
		_ = out.Encode(op)
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		client := id*goroutines + g
		wg.Go(func() {
			for !done() {
				ctx, cancel := context.WithDeadline(context.Background(), capAt)
				call := time.Now().UnixNano()
				l, err := c.Acquire(ctx, key, ttl, opts...)
				cancel()
				if err != nil {
					continue
				}
				if limit > 0 {
					emit(linOp{Kind: "acquire", Client: client, Call: call, Return: time.Now().UnixNano(), Fence: l.Fence()})
				}
				held := time.Now().UnixNano()
				kctx, stop := l.KeepAlive(context.Background())
				work := 500 * time.Microsecond
				if limit > 0 {
					work = 20 * time.Millisecond // long enough for the nemesis to pause holders, not only waiters
				}
				section(store, reg, l.Fence(), client, emit, work)
				stop()
				lost := errors.Is(context.Cause(kctx), padlock.ErrLost)
				call = time.Now().UnixNano()
				deadline := l.Deadline().UnixNano()
				err = l.Release(context.Background())
				if limit == 0 {
					// The time it held the lock by its own reckoning: from
					// Acquire's return to its local deadline or its
					// Release's call, whichever came first.
					emit(linOp{Kind: "hold", Client: client, Call: held, Return: min(deadline, call), Fence: l.Fence()})
					continue
				}
				// How the place ended, for the model of the holders: a
				// release; or, when it was not held any more, before we
				// learned of that, and after either its local deadline
				// (Redis never expires it earlier) or the call of our
				// Release (whose first attempt may have removed it, its
				// reply lost and the retry finding it gone); or, when
				// Release could not reach Redis, at any time after it was
				// called.
				op := linOp{Kind: "end", Client: client, Return: time.Now().UnixNano(), Fence: l.Fence()}
				switch {
				case lost || errors.Is(err, padlock.ErrNotHeld):
					op.Call = min(l.Deadline().UnixNano(), call)
				case err == nil:
					op.Kind, op.Call = "release", call
				default:
					op.Call, op.Return = call, math.MaxInt64
				}
				emit(op)
			}
		})
	}
	wg.Wait()
	return nil
}

// semStore is the store of the workloads: a register that remembers the
// highest fence that read or wrote it (KEYS[1], a hash). A read (ARGV[1] =
// "read") raises that fence to the reader's ARGV[2] and returns the value;
// a write of ARGV[3] is applied only if no higher fence has read or
// written since, and returns 1, else 0 (fence 0, unfenced: never
// rejected). A store that checked fences on writes alone would accept a
// stale holder's write that lands between a newer holder's read and its
// write (a lost update no lock can prevent: it happened when a holder and
// the waiter the lock passed to were paused and resumed together).
// Accepted writes are linearizable however many holders run at once, as
// long as fences are unique; whether holders overlap at all is checked
// apart, on the times they held (see TestLinearizableUnderFaults).
const semStore = `
local top = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
local f = tonumber(ARGV[2])
if ARGV[1] == 'read' then
  if f > top then redis.call('HSET', KEYS[1], 'fence', f) end
  return tonumber(redis.call('HGET', KEYS[1], 'value') or '0')
end
if f < top then return 0 end
redis.call('HSET', KEYS[1], 'fence', f, 'value', ARGV[3])
return 1`

// section is one critical section: a fenced read, the work (a sleep),
// then a fenced write of the value plus one. A careless holder writes
// even if its lease ended meanwhile, as one paused between a check and its
// write would.
func section(rdb *redis.Client, reg string, fence int64, client int, emit func(linOp), work time.Duration) {
	call := time.Now().UnixNano()
	v, err := rdb.Eval(context.Background(), semStore, []string{reg}, "read", fence).Int64()
	if err != nil {
		return // a failed read changes nothing: no operation
	}
	emit(linOp{Kind: "read", Client: client, Call: call, Return: time.Now().UnixNano(), Value: v})
	time.Sleep(work)
	emit(writeOp(client, v, func() (bool, error) {
		return rdb.Eval(context.Background(), semStore, []string{reg}, "write", fence, v+1).Bool()
	}))
}

// writeOp runs write, the write of v+1 over v, and returns it as an
// operation: applied ("ok"), "rejected" as stale, or "unknown" on an error.
func writeOp(client int, v int64, write func() (bool, error)) linOp {
	op := linOp{Kind: "write", Client: client, Call: time.Now().UnixNano(), From: v, To: v + 1}
	ok, err := write()
	op.Return = time.Now().UnixNano()
	switch {
	case err != nil:
		op.Result = "unknown"
	case ok:
		op.Result = "ok"
	default:
		op.Result = "rejected"
	}
	return op
}
