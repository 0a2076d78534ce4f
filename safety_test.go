package padlock_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/faultproxy"
	"github.com/padlock-go/padlock/internal/redistest"
)

// A holder in another process is paused (SIGSTOP) past its ttl; another
// takes the lock. When the paused holder runs again, its keep-alive
// reports ErrLost within one renewal period, its Release and Extend return
// ErrNotHeld, and its late write is rejected by the fence-checking store.
// The same for a place of a semaphore, and for a shared hold (the next
// holder then an exclusive one).
func TestPausedHolder(t *testing.T) {
	t.Parallel() // mostly waits, on servers of its own
	tests := []struct {
		kind string
		next []padlock.Option
	}{
		{"lock", nil},
		{"semaphore", []padlock.Option{padlock.WithLimit(1)}},
		{"shared", nil},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			e := newReal(t, nil)
			pausedHolder(t, e, tt.kind, tt.next)
		})
	}
}

func pausedHolder(t *testing.T, e *env, kind string, nextOpts []padlock.Option) {
	const ttl = 300 * time.Millisecond
	reg := e.key + ":register"
	ch := startChild(t, "holder", map[string]string{"ADDR": e.srv.Addr(), "KEY": e.key, "REG": reg, "TTL": ttl.String(), "KIND": kind})
	first := ch.expect(t, "acquired fence=", 10*time.Second)

	require.NoError(t, ch.cmd.Process.Signal(syscall.SIGSTOP))
	next, err := e.c.Acquire(e.ctx, e.key, time.Minute, append(nextOpts, padlock.WithFencing())...)
	require.NoError(t, err, "the paused holder's lock expired")
	assert.Equal(t, "acquired fence="+strconv.FormatInt(next.Fence()-1, 10), first, "fences go up")
	ok, err := e.raw.Eval(e.ctx, fencedWrite, []string{reg}, next.Fence(), "written by the new holder").Bool()
	require.NoError(t, err)
	require.True(t, ok)

	resumed := time.Now()
	require.NoError(t, ch.cmd.Process.Signal(syscall.SIGCONT))
	lost := ch.expect(t, "lost ", 5*time.Second)
	assert.Contains(t, lost, "padlock: lock lost")
	// Its local deadline passed while it was stopped: the loss is
	// signalled at once (about a millisecond here); the slack is for a
	// loaded machine scheduling the resumed process.
	if d := time.Since(resumed); d > ttl/3+150*time.Millisecond {
		t.Errorf("ErrLost %v after the holder resumed; one renewal period is %v", d, ttl/3)
	}
	ch.send(t, "write")
	assert.Equal(t, "write ok=false err=<nil>", ch.expect(t, "write ", 5*time.Second), "the stale write was rejected")
	ch.send(t, "extend")
	assert.Equal(t, "extend ErrNotHeld", ch.expect(t, "extend ", 5*time.Second))
	ch.send(t, "release")
	assert.Equal(t, "release ErrNotHeld", ch.expect(t, "release ", 5*time.Second))

	v, err := e.raw.HGet(e.ctx, reg, "value").Result()
	require.NoError(t, err)
	assert.Equal(t, "written by the new holder", v)
	info, err := e.c.Inspect(e.ctx, e.key)
	require.NoError(t, err)
	if kind == "semaphore" {
		require.Len(t, info.Holders, 1)
		assert.Equal(t, next.Token(), info.Holders[0].Token, "the new holder's place is untouched")
	} else {
		assert.Equal(t, next.Token(), info.Token, "the new holder's lock is untouched")
	}
	require.NoError(t, next.Release(e.ctx))
}

// Redis restarts without persistence: the lock and the fence counter are
// gone, and fences start again at 1 (documented in docs/SAFETY.md). With
// appendfsync always, both survive a kill -9 and fences keep going up.
func TestFenceCounterAcrossRestarts(t *testing.T) {
	t.Parallel()
	for _, aof := range []bool{false, true} {
		t.Run(fmt.Sprintf("aof=%v", aof), func(t *testing.T) {
			var opts []redistest.Option
			if aof {
				opts = append(opts, redistest.WithAOF())
			}
			e := newReal(t, opts)
			for range 3 {
				l, err := e.c.TryAcquire(e.ctx, e.key, time.Minute, padlock.WithFencing())
				require.NoError(t, err)
				require.NoError(t, l.Release(e.ctx))
			}
			held, err := e.c.TryAcquire(e.ctx, e.key, time.Minute, padlock.WithFencing())
			require.NoError(t, err)
			last := held.Fence()
			require.Equal(t, int64(4), last)

			e.srv.Kill() // kill -9
			e.srv.Restart()
			l, err := e.c.TryAcquire(e.ctx, e.key, time.Minute, padlock.WithFencing())
			if aof {
				require.ErrorIs(t, err, padlock.ErrNotAcquired, "the lock survived the crash")
				require.NoError(t, held.Release(e.ctx))
				l, err = e.c.TryAcquire(e.ctx, e.key, time.Minute, padlock.WithFencing())
				require.NoError(t, err)
				assert.Greater(t, l.Fence(), last, "fences keep going up across a crash with appendfsync always")
			} else {
				require.NoError(t, err, "the lock was lost with the data")
				assert.Equal(t, int64(1), l.Fence(), "without persistence the counter starts again")
				require.ErrorIs(t, held.Release(e.ctx), padlock.ErrNotHeld)
			}
			require.NoError(t, l.Release(e.ctx))
		})
	}
}

// The linearizability check: 4 processes of 4 goroutines take one lock
// while a nemesis pauses processes past the ttl, drops replies and adds
// latency; in each critical section a holder reads a register in Redis and
// writes it plus one through the fence-checking store (see semStore). The
// history, checked with porcupine against a model in which a write must
// follow the read it was based on (no lost update), has no anomaly; and no
// two holders' times (Acquire's return to the local deadline or Release's
// call) overlap, fenced or not. The same workload without fencing is run
// too, and its lost updates reported.
func TestLinearizableUnderFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("a workload of several seconds")
	}
	if !longRun() {
		t.Parallel() // the long run has the machine to itself
	}
	// The default run touches every path in a few seconds, beside the
	// package's other tests (2,034 operations alone under -race, 384 among
	// them: a history worth checking either way); the long mode
	// (PADLOCK_LONG=1, as in CI) runs the full 30s and 10s workloads. A
	// workload runs on past its time until its history holds minOps
	// operations (for at most 3 times its time), so a slow machine checks
	// as long a history, not a shorter one.
	fencedFor, unfencedFor, minOps := 4*time.Second, time.Second, 100
	if longRun() {
		fencedFor, unfencedFor, minOps = 30*time.Second, 10*time.Second, 10000
	}
	fenced := runLinWorkload(t, true, 0, fencedFor, minOps)
	require.GreaterOrEqual(t, len(fenced.ops), minOps, "operations in the fenced history")
	res := porcupine.CheckOperationsTimeout(registerModel, fenced.ops, time.Minute)
	t.Logf("fenced: %d operations (%d writes applied, %d rejected as stale, %d unknown), %d pauses: %v",
		len(fenced.ops), fenced.applied, fenced.rejected, fenced.unknown, fenced.pauses, res)
	require.Equal(t, porcupine.Ok, res, "the fenced history is linearizable")
	checkExclusive(t, "fenced", fenced.holds)

	unfenced := runLinWorkload(t, false, 0, unfencedFor, 0)
	res = porcupine.CheckOperationsTimeout(registerModel, unfenced.ops, 20*time.Second)
	t.Logf("unfenced (reported, not asserted): %d operations, %d writes applied, final value %d: %d lost updates; porcupine: %v",
		len(unfenced.ops), unfenced.applied, unfenced.final, unfenced.applied-unfenced.final, res)
	checkExclusive(t, "unfenced", unfenced.holds)
}

// The same workload on a semaphore of 2 places, under the same nemesis:
// each holder reads and writes the register through a store that rejects a
// write when a higher fence has read or written since (so accepted writes
// are linearizable however many hold at once, provided fences are unique
// and increasing), and every acquire, release and expiry of a place is
// checked against a model of at most 2 holders. An expiry counts from the
// holder's local deadline (Redis never expires a place earlier) to when the
// holder learned of it.
func TestLinearizableSemaphoreUnderFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("a workload of several seconds")
	}
	if !longRun() {
		t.Parallel() // the long run has the machine to itself
	}
	runFor, minOps := 3*time.Second, 100
	if longRun() {
		runFor, minOps = 20*time.Second, 1000
	}
	run := runLinWorkload(t, true, 2, runFor, minOps)
	require.GreaterOrEqual(t, len(run.ops), minOps, "operations on the register")
	res := porcupine.CheckOperationsTimeout(registerModel, run.ops, time.Minute)
	t.Logf("register: %d operations (%d writes applied, %d rejected as stale, %d unknown), %d pauses: %v",
		len(run.ops), run.applied, run.rejected, run.unknown, run.pauses, res)
	require.Equal(t, porcupine.Ok, res, "the fenced writes are linearizable")
	res = porcupine.CheckOperationsTimeout(holdersModel(2), run.holders, time.Minute)
	t.Logf("holders: %d acquires, releases and expiries, at most 2 at once: %v", len(run.holders), res)
	require.Equal(t, porcupine.Ok, res, "never more than 2 holders")
	// A pause expires a place only when it stops a process while one of
	// its goroutines holds one (a few per long run; not asserted:
	// TestPausedHolder/semaphore does that deterministically).
	t.Logf("%d places expired under the nemesis", run.expired)
}

// holderInput is an operation on the holders of a semaphore.
type holderInput struct {
	kind  string // "acquire", "release" or "end" (an expiry)
	fence int64
}

// holdersModel is a semaphore of limit places: an acquire takes a place
// while fewer than limit are taken; a release or an expiry frees the
// place of a holder that has one. The state is the holders' fences, sorted
// and written out.
func holdersModel(limit int) porcupine.Model {
	decode := func(s string) []int64 {
		var fs []int64
		for _, f := range strings.Fields(s) {
			n, _ := strconv.ParseInt(f, 10, 64)
			fs = append(fs, n)
		}
		return fs
	}
	encode := func(fs []int64) string {
		slices.Sort(fs)
		parts := make([]string, len(fs))
		for i, f := range fs {
			parts[i] = strconv.FormatInt(f, 10)
		}
		return strings.Join(parts, " ")
	}
	return porcupine.Model{
		Init: func() any { return "" },
		Step: func(state, input, _ any) (bool, any) {
			fs, in := decode(state.(string)), input.(holderInput)
			i := slices.Index(fs, in.fence)
			if in.kind == "acquire" {
				if i >= 0 || len(fs) >= limit {
					return false, state
				}
				return true, encode(append(fs, in.fence))
			}
			if i < 0 {
				return false, state
			}
			return true, encode(slices.Delete(fs, i, i+1))
		},
	}
}

// linRun is one run of the workload.
type linRun struct {
	ops                        []porcupine.Operation
	holders                    []porcupine.Operation // acquires, releases and expiries of a semaphore's places
	expired                    int
	applied, rejected, unknown int64
	final                      int64
	pauses                     int
	holds                      []linOp // a lock's holders: when each held it, by its own reckoning
}

// checkExclusive fails t if two of holds overlap: a holder's time runs from
// its Acquire's return to its local deadline or its Release's call, and the
// next holder's Acquire may only return after that. This is what a lock
// promises (at most one holder by Deadline); the register checks what
// fences add. A hold whose local deadline had passed when Acquire returned
// (its process was paused between the acquire's reply and that return) is
// empty: the holder knew it held nothing, by Deadline.
func checkExclusive(t *testing.T, what string, holds []linOp) {
	t.Helper()
	slices.SortFunc(holds, func(a, b linOp) int { return cmp.Compare(a.Call, b.Call) })
	var prev linOp
	overlaps, empty := 0, 0
	for _, h := range holds {
		if h.Return <= h.Call {
			empty++
			continue
		}
		if prev.Return != 0 && h.Call < prev.Return {
			overlaps++
			t.Errorf("%s: holder %d (fence %d) held from %d to %d while holder %d (fence %d) held from %d to %d: %v of overlap",
				what, h.Client, h.Fence, h.Call, h.Return, prev.Client, prev.Fence, prev.Call, prev.Return,
				time.Duration(prev.Return-h.Call))
		}
		if h.Return > prev.Return {
			prev = h
		}
	}
	t.Logf("%s: %d holds, %d overlapping, %d empty (paused past their deadline before Acquire returned)",
		what, len(holds), overlaps, empty)
}

// writeInput is the input of a write: the value read, and the one written.
type writeInput struct{ from, to int64 }

// registerModel: reads return the state; an applied write must find the
// state it read (else an update was lost); a write of unknown outcome may
// or may not have happened.
var registerModel = (&porcupine.NondeterministicModel{
	Init: func() []any { return []any{int64(0)} },
	Step: func(state, input, output any) []any {
		s := state.(int64)
		switch in := input.(type) {
		case nil: // a read
			if output.(int64) == s {
				return []any{s}
			}
			return nil
		case writeInput:
			if output.(string) == "unknown" {
				if s == in.from {
					return []any{s, in.to}
				}
				return []any{s}
			}
			if s == in.from {
				return []any{in.to}
			}
			return nil
		}
		return nil
	},
}).ToModel()

// runLinWorkload runs the workload for d and until its history holds
// minOps operations on the register, for at most 3d: fenced or not, on a
// lock, or on a semaphore of limit places when limit > 0.
func runLinWorkload(t *testing.T, fenced bool, limit int, d time.Duration, minOps int) linRun {
	t.Helper()
	const processes, goroutines, ttl = 4, 4, 200 * time.Millisecond
	e := newReal(t, nil)
	reg := e.key + ":register"
	proxies := make([]*faultproxy.Proxy, processes)
	children := make([]*child, processes)
	f := "0"
	if fenced {
		f = "1"
	}
	for i := range processes {
		p, err := faultproxy.Start(e.srv.Addr())
		require.NoError(t, err)
		t.Cleanup(p.Close)
		proxies[i] = p
		children[i] = startChild(t, "lin", map[string]string{
			"ADDR": p.Addr(), "KEY": e.key, "REG": reg, "FENCED": f, "ID": strconv.Itoa(i), "LIMIT": strconv.Itoa(limit),
			"GOROUTINES": strconv.Itoa(goroutines), "TTL": ttl.String(), "FOR": d.String(),
			"MIN": strconv.Itoa((minOps + processes - 1) / processes),
		})
	}

	// The nemesis, until the children are done.
	var run linRun
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(300+rand.IntN(700)) * time.Millisecond):
			}
			i := rand.IntN(processes)
			switch rand.IntN(4) {
			case 0, 3: // pause a process past the ttl
				_ = children[i].cmd.Process.Signal(syscall.SIGSTOP)
				time.Sleep(ttl + time.Duration(rand.IntN(300))*time.Millisecond)
				_ = children[i].cmd.Process.Signal(syscall.SIGCONT)
				run.pauses++
			case 1: // lose a reply
				proxies[i].DropNextReply()
			case 2: // a slow network for a while
				proxies[i].SetLatency(time.Duration(5+rand.IntN(20)) * time.Millisecond)
				time.Sleep(300 * time.Millisecond)
				proxies[i].SetLatency(0)
			}
		}
	})

	for _, ch := range children {
		for line := range ch.lines {
			var op linOp
			require.NoError(t, json.Unmarshal([]byte(line), &op), line)
			switch {
			case op.Kind == "acquire" || op.Kind == "release" || op.Kind == "end":
				if op.Kind == "end" {
					run.expired++
				}
				run.holders = append(run.holders, porcupine.Operation{ClientId: op.Client, Call: op.Call, Return: op.Return,
					Input: holderInput{op.Kind, op.Fence}})
			case op.Kind == "hold":
				run.holds = append(run.holds, op)
			case op.Kind == "read":
				run.ops = append(run.ops, porcupine.Operation{ClientId: op.Client, Call: op.Call, Return: op.Return, Output: op.Value})
			case op.Result == "rejected":
				run.rejected++ // no effect: not an operation on the register
			default:
				ret := op.Return
				if op.Result == "unknown" {
					run.unknown++
					ret = math.MaxInt64 // may take effect at any time after its call
				} else {
					run.applied++
				}
				run.ops = append(run.ops, porcupine.Operation{ClientId: op.Client, Call: op.Call, Return: ret,
					Input: writeInput{op.From, op.To}, Output: op.Result})
			}
		}
		require.NoError(t, ch.cmd.Wait(), "child")
	}
	close(stop)
	wg.Wait()
	v, err := e.raw.HGet(context.Background(), reg, "value").Result()
	require.NoError(t, err)
	run.final, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	return run
}

// A primary with a replica: a lock is copied to the replica, but
// asynchronously: the primary hands out a lock before any replica has it,
// so a failover in that window loses it (the limit docs/SAFETY.md states).
func TestReplicaSeesTheLockOnlyOnceReplicated(t *testing.T) {
	longOnly(t)
	t.Parallel() // starts servers of its own; mostly waits
	e := newReal(t, nil)
	replica := redistest.StartReplica(t, e.srv)
	rr := replica.Client()
	l, err := e.c.TryAcquire(e.ctx, e.key, time.Minute, padlock.WithFencing())
	require.NoError(t, err)
	require.Eventually(t, func() bool { return unspanned(rr.Get(e.ctx, e.key).Val()) == l.Token() }, 5*time.Second, 10*time.Millisecond,
		"the lock reaches the replica")
	require.NoError(t, l.Release(e.ctx))

	replica.Pause()
	l2, err := e.c.TryAcquire(e.ctx, e.key, time.Minute)
	require.NoError(t, err, "the primary does not wait for its replica")
	acked, err := e.raw.Wait(e.ctx, 1, 200*time.Millisecond).Result()
	require.NoError(t, err)
	assert.Zero(t, acked, "no replica had the lock when it was handed out")
	replica.Resume()
	require.Eventually(t, func() bool { return unspanned(rr.Get(e.ctx, e.key).Val()) == l2.Token() }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, l2.Release(e.ctx))
}

// A release hands the lock to a waiter in another process that is
// stopped (SIGSTOP) or was killed at that moment. The lock is not lost:
// the next waiter gets it when the handed lock's ttl runs out, with a
// higher fence. A stopped waiter that resumes does not take its stale
// hand-off for a lock: it confirms it, finds it gone, and waits again.
func TestHandOffToAStoppedOrKilledWaiter(t *testing.T) {
	t.Parallel() // mostly waits, on servers of its own
	for _, how := range []string{"stopped", "killed"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			e := newReal(t, nil)
			const ttl = 500 * time.Millisecond
			reg := e.key + ":register"
			holder, err := e.c.TryAcquire(e.ctx, e.key, time.Minute, padlock.WithFencing())
			require.NoError(t, err)
			ch := startChild(t, "waiter", map[string]string{"ADDR": e.srv.Addr(), "KEY": e.key, "REG": reg, "TTL": ttl.String()})
			ch.expect(t, "waiting", 10*time.Second)
			waitFor(t, e, 1)

			next := make(chan *padlock.Lock, 1)
			go func() {
				l, err := e.c.Acquire(e.ctx, e.key, time.Minute, padlock.WithFencing(), neverPoll)
				assert.NoError(t, err)
				next <- l
			}()
			waitFor(t, e, 2)

			sig := syscall.SIGSTOP
			if how == "killed" {
				sig = syscall.SIGKILL
			}
			require.NoError(t, ch.cmd.Process.Signal(sig))
			if how == "stopped" {
				// A signal takes effect a moment after kill returns: under
				// load the child could still take the grant, and hold it.
				waitStopped(t, ch.cmd.Process.Pid)
			}
			released := time.Now()
			require.NoError(t, holder.Release(e.ctx))
			var l *padlock.Lock
			select {
			case l = <-next:
			case <-time.After(ttl + 3*time.Second):
				t.Fatal("the lock handed to the " + how + " waiter was stranded past its ttl")
			}
			took := time.Since(released)
			t.Logf("the next waiter got it %v after the release (the handed lock's ttl: %v)", took.Round(time.Millisecond), ttl)
			assert.GreaterOrEqual(t, took, ttl/2, "it waited for the handed lock to expire")
			assert.Equal(t, holder.Fence()+2, l.Fence(), "the hand-off to the %s waiter took a fence", how)
			ok, err := e.raw.Eval(e.ctx, fencedWrite, []string{reg}, l.Fence(), "written by the next waiter").Bool()
			require.NoError(t, err)
			require.True(t, ok)
			if how == "killed" {
				require.NoError(t, l.Release(e.ctx))
				return
			}

			require.NoError(t, ch.cmd.Process.Signal(syscall.SIGCONT))
			select {
			case line := <-ch.lines:
				t.Fatalf("the resumed waiter said %q while the lock was held by another", line)
			case <-time.After(time.Second):
			}
			assert.Equal(t, l.Token(), unspanned(e.get(e.key)), "the holder's lock is untouched")
			require.NoError(t, l.Release(e.ctx))
			assert.Equal(t, "acquired fence="+strconv.FormatInt(l.Fence()+1, 10), ch.expect(t, "acquired", 5*time.Second),
				"the resumed waiter queued again and got the lock in its turn")
			ch.send(t, "write")
			assert.Equal(t, "write ok=true err=<nil>", ch.expect(t, "write ", 5*time.Second))
			ch.send(t, "release")
			assert.Equal(t, "release nil", ch.expect(t, "release ", 5*time.Second))
		})
	}
}

// waitStopped waits until the process pid is stopped (SIGSTOP took
// effect), as /proc says; where there is no /proc it does not wait.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		stat, err := os.ReadFile(path)
		if err != nil {
			return // no /proc here
		}
		// The state follows the command name in parentheses.
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && (stat[i+2] == 'T' || stat[i+2] == 't') {
			return
		}
	}
	t.Fatalf("process %d not stopped 5s after SIGSTOP", pid)
}
