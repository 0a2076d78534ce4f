package main

import (
	"context"
	"errors"
	"flag"
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

// releaseTimeout bounds the release after the command has exited.
const releaseTimeout = 5 * time.Second

// runCmd is 'padlock run'.
func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fset := newFlags("run", "padlock run [flags] KEY -- COMMAND [ARGS...]",
		"Runs COMMAND while holding the lock KEY, and exits with its status.\n"+
			"The command sees PADLOCK_KEY, PADLOCK_TOKEN and, with -fence, PADLOCK_FENCE.", stderr)
	redisURL := redisFlag(fset)
	ttl := fset.Duration("ttl", 30*time.Second, "lock TTL; renewed every ttl/3 while the command runs")
	lf := addLockFlags(fset)
	conflictExit := fset.Int("conflict-exit", exitConflict, "exit status when the lock is held elsewhere")
	grace := fset.Duration("grace", 5*time.Second, "when the lock is lost: time between SIGTERM and SIGKILL")
	maxHold := fset.Duration("max-hold", 0, "stop renewing the lock this long after it was taken: the command is ended as for a lost lock (0: no cap)")
	if code, ok := parseFlags(fset, args); !ok {
		return code
	}
	key, command, ok := keyAndCommand(fset, "run", stderr)
	switch {
	case !ok:
		return exitUsage
	case *conflictExit < 0 || *conflictExit > 255:
		fmt.Fprintf(stderr, "padlock run: -conflict-exit %d is not an exit status (0-255)\n", *conflictExit)
		return exitUsage
	case *grace < 0 || *maxHold < 0:
		fmt.Fprintln(stderr, "padlock run: -grace and -max-hold cannot be negative")
		return exitUsage
	}
	opts, ok := lf.options("run", stderr)
	if !ok {
		return exitUsage
	}
	if *maxHold > 0 {
		opts = append(opts, padlock.WithMaxHold(*maxHold))
	}

	rdb, err := dial(*redisURL)
	if err != nil {
		fmt.Fprintf(stderr, "padlock run: %v\n", err)
		return exitUsage
	}
	defer rdb.Close()
	// Lost locks and failed releases are logged to stderr (slog, text).
	locks := padlock.New(rdb, padlock.WithLogger(slog.New(slog.NewTextHandler(stderr, nil))))

	// Signals: while waiting they end the wait; while the command runs they
	// are forwarded to it.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	lock, status := acquire(ctx, locks, key, *ttl, *lf.wait, opts, sigs, stderr)
	if lock == nil {
		if status == exitConflict {
			status = *conflictExit
		}
		return status
	}
	return runLocked(ctx, lock, command, *lf.fence, *grace, sigs, stdout, stderr)
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
// or nil and the exit status, having said why on stderr.
func acquire(ctx context.Context, locks *padlock.Client, key string, ttl, wait time.Duration,
	opts []padlock.Option, sigs <-chan os.Signal, stderr io.Writer) (*padlock.Lock, int) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	if wait > 0 {
		actx, cancel = context.WithTimeout(actx, wait)
		defer cancel()
	}
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
			release(r.lock, stderr)
		}
		fmt.Fprintf(stderr, "padlock: %v while waiting for %s\n", sig, key)
		return nil, 128 + int(sig.(syscall.Signal))
	}

	switch err := r.err; {
	case err == nil:
		return r.lock, 0
	case errors.Is(err, padlock.ErrNotAcquired):
		fmt.Fprintf(stderr, "padlock: %s is held elsewhere%s\n", key, holder(locks, key))
		return nil, exitConflict
	case errors.Is(err, padlock.ErrInvalid):
		fmt.Fprintf(stderr, "padlock: %v\n", err)
		return nil, exitUsage
	default:
		fmt.Fprintf(stderr, "padlock: cannot lock %s: %v\n", key, err)
		return nil, exitUnavailable
	}
}

// holder describes who holds key, for the conflict message; "" if unknown.
func holder(locks *padlock.Client, key string) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
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
	return fmt.Sprintf("%s (%v left)", who, info.TTL.Round(time.Millisecond))
}

// runLocked runs command while keeping lock alive, releases the lock when
// the command exits, and returns the exit status.
func runLocked(ctx context.Context, lock *padlock.Lock, command []string, fence bool, grace time.Duration,
	sigs <-chan os.Signal, stdout, stderr io.Writer) int {
	defer release(lock, stderr)
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
			why := "lost"
			if errors.Is(context.Cause(kctx), padlock.ErrMaxHold) {
				why = "held for its -max-hold, not renewed, and expired"
			}
			fmt.Fprintf(stderr, "padlock: lock %s %s while the command ran (%v); terminating it\n",
				lock.Key(), why, context.Cause(kctx))
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

// release releases lock, saying on stderr if it could not.
func release(lock *padlock.Lock, stderr io.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := lock.Release(ctx); err != nil && !errors.Is(err, padlock.ErrNotHeld) {
		fmt.Fprintf(stderr, "padlock: release %s: %v (it expires by its TTL)\n", lock.Key(), err)
	}
}

// keyAndCommand reads KEY [--] COMMAND [ARGS...] from fset's arguments;
// ok is false, said on stderr, when there is no command.
func keyAndCommand(fset *flag.FlagSet, verb string, stderr io.Writer) (key string, command []string, ok bool) {
	rest := fset.Args()
	if len(rest) >= 2 && rest[1] == "--" {
		rest = append(rest[:1:1], rest[2:]...)
	}
	if len(rest) < 2 {
		fmt.Fprintf(stderr, "padlock %s: need KEY -- COMMAND\n", verb)
		fset.Usage()
		return "", nil, false
	}
	return rest[0], rest[1:], true
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
