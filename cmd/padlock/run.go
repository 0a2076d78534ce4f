package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/padlock-go/padlock"
)

// runExits are the exit statuses of 'padlock run', for its -h.
const runExits = "  N      the command's own status (128+N if signal N killed it)\n" +
	exitUsageHelp + exitRedisHelp +
	"  75     the lock is held elsewhere (-conflict-exit); the command did not run\n" +
	"  79     the lock was lost while the command ran; the command was terminated\n" +
	"  126    the command could not be started\n" +
	"  127    the command was not found\n" +
	"  128+N  signal N came while waiting for the lock; the command did not run\n"

// runCmd is 'padlock run'.
func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	v := newVerb("run", "padlock run [flags] KEY -- COMMAND [ARGS...]",
		"Runs COMMAND while holding the lock KEY, and exits with its status.\n"+
			"The command sees PADLOCK_KEY, PADLOCK_TOKEN and, with -fence, PADLOCK_FENCE.", runExits, stdout, stderr)
	rf := addRedisFlags(v.fset)
	ttl := v.fset.Duration("ttl", 30*time.Second, "lock TTL; renewed every ttl/3 while the command runs")
	lf := addLockFlags(v.fset)
	conflictExit := v.fset.Int("conflict-exit", exitConflict, "exit status when the lock is held elsewhere")
	grace := v.fset.Duration("grace", 5*time.Second, "when the lock is lost: time between SIGTERM and SIGKILL")
	maxHold := v.fset.Duration("max-hold", 0, "stop renewing the lock this long after it was taken: the command is ended as for a lost lock (0: no cap)")
	if code, ok := v.parse(args); !ok {
		return code
	}
	key, command, code, ok := v.keyAndCommand()
	switch {
	case !ok:
		return code
	case *ttl < time.Millisecond:
		return v.usageError("-ttl %v is under 1ms", *ttl)
	case *conflictExit < 0 || *conflictExit > 255:
		return v.usageError("-conflict-exit %d is not an exit status (0-255)", *conflictExit)
	case *grace < 0:
		return v.usageError("-grace %v cannot be negative", *grace)
	case *maxHold < 0:
		return v.usageError("-max-hold %v cannot be negative (0: no cap)", *maxHold)
	}
	c, err := rf.conn()
	if err != nil {
		return v.usageError("%v", err)
	}
	opts, code, ok := lf.options(v)
	if !ok {
		return code
	}
	if *maxHold > 0 {
		opts = append(opts, padlock.WithMaxHold(*maxHold))
	}
	// Lost locks and failed releases are logged to stderr (slog, text).
	locks, done, code := v.client(c, padlock.WithLogger(slog.New(slog.NewTextHandler(stderr, nil))))
	if locks == nil {
		return code
	}
	defer done()

	// Signals: while waiting they end the wait; while the command runs they
	// are forwarded to it.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	lock, status := v.acquire(ctx, locks, c, key, *ttl, *lf.wait, opts, sigs)
	if lock == nil {
		if status == exitConflict {
			status = *conflictExit
		}
		return status
	}
	return runLocked(ctx, lock, c, command, *lf.fence, *grace, sigs, stdout, stderr)
}

// defaultMetadata names this process: host and pid.
func defaultMetadata() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return "host=" + host + " pid=" + strconv.Itoa(os.Getpid())
}

// acquire takes the lock, once or waiting up to wait. It returns the Lock,
// or nil and the exit status, having said why on stderr. Trying once ends
// after the timeout; waiting, after wait, however long Redis takes to
// answer.
func (v *verb) acquire(ctx context.Context, locks *padlock.Client, c conn, key string, ttl, wait time.Duration,
	opts []padlock.Option, sigs <-chan os.Signal) (*padlock.Lock, int) {
	limit := c.timeout
	if wait > 0 {
		limit = wait
	}
	actx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	type result struct {
		lock *padlock.Lock
		err  error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		if wait > 0 {
			r.lock, r.err = locks.Acquire(actx, key, ttl, opts...)
		} else {
			r.lock, r.err = locks.TryAcquire(actx, key, ttl, opts...)
		}
		done <- r
	}()

	var r result
	select {
	case r = <-done:
	case sig := <-sigs:
		cancel()
		if r = <-done; r.lock != nil {
			release(r.lock, c, v.stderr)
		}
		fmt.Fprintf(v.stderr, "padlock %s: %v while waiting for %s\n", v.name, sig, key)
		return nil, 128 + int(sig.(syscall.Signal))
	}

	switch err := r.err; {
	case err == nil:
		return r.lock, 0
	case errors.Is(err, padlock.ErrNotAcquired):
		fmt.Fprintf(v.stderr, "padlock %s: %s is held elsewhere%s\n", v.name, key, holder(ctx, locks, c, key))
		return nil, exitConflict
	}
	if wait > 0 {
		return nil, v.failWithin("take the lock "+key, c, fmt.Sprintf("-wait %v", wait), r.err)
	}
	return nil, v.fail("take the lock "+key, c, r.err)
}

// holder describes who holds key, for the conflict message; "" if unknown.
func holder(ctx context.Context, locks *padlock.Client, c conn, key string) string {
	ctx, cancel := c.call(ctx)
	defer cancel()
	info, err := locks.Inspect(ctx, key)
	if err != nil || !info.Held {
		return ""
	}
	if info.Kind == "semaphore" || info.Kind == "shared" {
		var who []string
		for _, h := range info.Holders {
			who = append(who, orNone(h.Metadata))
		}
		return fmt.Sprintf(" by %d holders (%s)", len(who), strings.Join(who, "; "))
	}
	who := ""
	if info.Metadata != "" {
		who = " by " + info.Metadata
	}
	return fmt.Sprintf("%s (%s)", who, left(info.TTL))
}

// runLocked runs command while keeping lock alive, releases the lock when
// the command exits, and returns the exit status.
func runLocked(ctx context.Context, lock *padlock.Lock, c conn, command []string, fence bool, grace time.Duration,
	sigs <-chan os.Signal, stdout, stderr io.Writer) int {
	defer release(lock, c, stderr)
	env := []string{"PADLOCK_KEY=" + lock.Key(), "PADLOCK_TOKEN=" + lock.Token()}
	if fence {
		env = append(env, "PADLOCK_FENCE="+strconv.FormatInt(lock.Fence(), 10))
	}
	kctx, stop := lock.KeepAlive(ctx)
	defer stop()
	cmd, exited, code := startCommand(command, env, stdout, stderr)
	if cmd == nil {
		return code
	}
	group := func(sig syscall.Signal) { signalGroup(cmd, sig) }

	lost := kctx.Done()
	for {
		select {
		case <-exited:
			if lost == nil { // the lock was lost and the command ended
				return exitLost
			}
			return status(cmd.ProcessState)
		case sig := <-sigs:
			group(sig.(syscall.Signal))
		case <-lost:
			lost = nil
			why := fmt.Sprintf("lost while the command ran (%s)", cause(context.Cause(kctx)))
			if errors.Is(context.Cause(kctx), padlock.ErrMaxHold) {
				why = "held for its -max-hold, not renewed, and expired while the command ran"
			}
			fmt.Fprintf(stderr, "padlock run: lock %s %s; terminating it\n", lock.Key(), why)
			group(syscall.SIGTERM)
			time.AfterFunc(grace, func() {
				select {
				case <-exited:
				default:
					group(syscall.SIGKILL)
				}
			})
		}
	}
}

// status is a finished command's exit status, 128+n for signal n.
func status(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// release releases the lock of 'padlock run', saying on stderr if it could not. It gives
// Redis the timeout to answer.
func release(lock *padlock.Lock, c conn, stderr io.Writer) {
	ctx, cancel := c.call(context.Background())
	defer cancel()
	if err := lock.Release(ctx); err != nil && !errors.Is(err, padlock.ErrNotHeld) {
		fmt.Fprintf(stderr, "padlock run: cannot release %s: %s (it expires by its TTL)\n", lock.Key(), cause(err))
	}
}

// keyAndCommand reads KEY [--] COMMAND [ARGS...] from the verb's
// arguments; false and exitUsage, said on stderr, when one is missing.
func (v *verb) keyAndCommand() (key string, command []string, code int, ok bool) {
	rest := v.fset.Args()
	if len(rest) >= 2 && rest[1] == "--" {
		rest = append(rest[:1:1], rest[2:]...)
	}
	switch {
	case len(rest) == 0:
		return "", nil, v.usageError("missing KEY -- COMMAND"), false
	case len(rest) == 1:
		return "", nil, v.usageError("missing COMMAND: padlock %s [flags] %s -- COMMAND [ARGS...]", v.name, rest[0]), false
	}
	return rest[0], rest[1:], 0, true
}

// startCommand starts command with env added to padlock's own, in a
// process group of its own (so that ending the group ends the whole tree;
// the command cannot read from a terminal), killed if padlock dies (see
// killWithParent), so that it never outlives the lock. It returns the
// command and a channel closed once it has exited; or a nil command and
// the exit status for a command that could not start, said on stderr.
func startCommand(command, env []string, stdout, stderr io.Writer) (*exec.Cmd, <-chan struct{}, int) {
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	killWithParent(cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "padlock: cannot run %s: %v\n", command[0], err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return nil, nil, exitNotFound
		}
		return nil, nil, exitCannotRun
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	return cmd, exited, 0
}

// signalGroup sends sig to the process group of cmd.
func signalGroup(cmd *exec.Cmd, sig syscall.Signal) { _ = syscall.Kill(-cmd.Process.Pid, sig) }
