package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/padlock-go/padlock"
)

// The verbs for shell scripts: a lock that outlives the command that took
// it, released or extended by a later command with its token.

// acquireCmd is 'padlock acquire'. It prints the lock's variables for
// eval, and exits 0, 75 when the lock is held elsewhere, 64 on usage
// errors, 69 when Redis cannot answer.
func acquireCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fset := newFlags("acquire", "padlock acquire [flags] KEY",
		"Takes the lock KEY and prints 'export' lines of PADLOCK_KEY, PADLOCK_TOKEN and,\n"+
			"with -fence, PADLOCK_FENCE, for eval \"$(padlock acquire KEY)\": a later\n"+
			"'padlock extend' or 'padlock release' in the same shell finds the token there.\n"+
			"The lock is not renewed: it expires after -ttl unless extended or released.", stderr)
	redisURL := redisFlag(fset)
	ttl := fset.Duration("ttl", 10*time.Minute, "lock TTL")
	lf := addLockFlags(fset)
	shared := fset.Bool("shared", false, "take a shared hold: many holders, no exclusive one")
	token := fset.String("token", "", "use this token instead of a random one (a job or pipeline id)")
	if code, ok := parseFlags(fset, args); !ok {
		return code
	}
	if fset.NArg() != 1 {
		fset.Usage()
		return exitUsage
	}
	opts, ok := lf.options("acquire", stderr)
	if !ok {
		return exitUsage
	}
	if *shared {
		opts = append(opts, padlock.WithShared())
	}
	if isSet(fset, "token") {
		opts = append(opts, padlock.WithToken(*token))
	}
	locks, done, code := client(*redisURL, "acquire", stderr)
	if locks == nil {
		return code
	}
	defer done()
	lock, status := acquire(ctx, locks, fset.Arg(0), *ttl, *lf.wait, opts, nil, stderr)
	if lock == nil {
		return status
	}
	fmt.Fprintf(stdout, "export PADLOCK_KEY=%s\nexport PADLOCK_TOKEN=%s\n", shellQuote(lock.Key()), shellQuote(lock.Token()))
	if *lf.fence {
		fmt.Fprintf(stdout, "export PADLOCK_FENCE=%d\n", lock.Fence())
	}
	return 0
}

// extendCmd is 'padlock extend'.
func extendCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fset := newFlags("extend", "padlock extend -ttl D [-token T] KEY",
		"Sets the lock KEY, held by the token, to expire D from now.\n"+
			"Exits 0 when done, 1 when the token does not hold KEY.", stderr)
	redisURL := redisFlag(fset)
	ttl := fset.Duration("ttl", 0, "the new TTL (required)")
	token := tokenFlag(fset)
	key, code, ok := verbArgs(fset, args, "extend", token, stderr)
	if !ok {
		return code
	}
	switch {
	case !isSet(fset, "ttl"):
		fmt.Fprintln(stderr, "padlock extend: -ttl is required")
		return exitUsage
	case *ttl < time.Millisecond:
		fmt.Fprintf(stderr, "padlock extend: -ttl %v is under 1ms\n", *ttl)
		return exitUsage
	}
	return onResumed(ctx, *redisURL, "extend", key, *token, stderr, func(lock *padlock.Lock) error {
		return lock.Extend(ctx, *ttl)
	})
}

// releaseCmd is 'padlock release'.
func releaseCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fset := newFlags("release", "padlock release [-token T] KEY",
		"Releases the lock KEY held by the token (the next waiter gets it).\n"+
			"Exits 0 when done, 1 when the token does not hold KEY.", stderr)
	redisURL := redisFlag(fset)
	token := tokenFlag(fset)
	key, code, ok := verbArgs(fset, args, "release", token, stderr)
	if !ok {
		return code
	}
	return onResumed(ctx, *redisURL, "release", key, *token, stderr, func(lock *padlock.Lock) error {
		return lock.Release(ctx)
	})
}

// breakCmd is 'padlock break'. It exits 0 whether or not anything held
// KEY.
func breakCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fset := newFlags("break", "padlock break [-redis URL] KEY",
		"Ends whatever holds the lock KEY (every holder of a semaphore or shared hold),\n"+
			"advances its fencing counter, and serves its waiters. For a stuck lock: its\n"+
			"holder finds out at its next renewal, extend or release.", stderr)
	redisURL := redisFlag(fset)
	if code, ok := parseFlags(fset, args); !ok {
		return code
	}
	if fset.NArg() != 1 {
		fset.Usage()
		return exitUsage
	}
	locks, done, code := client(*redisURL, "break", stderr)
	if locks == nil {
		return code
	}
	defer done()
	key := fset.Arg(0)
	info, err := locks.Break(ctx, key)
	if code, failed := failure("break", key, err, stderr); failed {
		return code
	}
	switch {
	case !info.Held:
		fmt.Fprintf(stdout, "%s: nobody held it; nothing changed\n", key)
	case info.Kind == "lock":
		fmt.Fprintf(stdout, "%s: broke the lock of %s (token %s, %v left)\n", key, orNone(info.Metadata), info.Token, info.TTL.Round(time.Millisecond))
	default:
		fmt.Fprintf(stdout, "%s: broke %d holders of a %s\n", key, len(info.Holders), info.Kind)
		for _, h := range info.Holders {
			fmt.Fprintf(stdout, "  %s (token %s, %v left)\n", orNone(h.Metadata), h.Token, h.TTL.Round(time.Millisecond))
		}
	}
	if info.Held && info.Fence > 0 {
		fmt.Fprintf(stdout, "  fence counter: %d -> %d\n", info.Fence, info.Fence+1)
	}
	return 0
}

// tokenFlag adds -token, by default $PADLOCK_TOKEN.
func tokenFlag(fset *flag.FlagSet) *string {
	return fset.String("token", os.Getenv("PADLOCK_TOKEN"), "the lock's token (default $PADLOCK_TOKEN)")
}

// verbArgs parses the flags of extend and release, and returns the key.
func verbArgs(fset *flag.FlagSet, args []string, verb string, token *string, stderr io.Writer) (key string, code int, ok bool) {
	if code, ok := parseFlags(fset, args); !ok {
		return "", code, false
	}
	switch {
	case fset.NArg() != 1:
		fset.Usage()
		return "", exitUsage, false
	case *token == "":
		fmt.Fprintf(stderr, "padlock %s: no token: pass -token or set PADLOCK_TOKEN\n", verb)
		return "", exitUsage, false
	}
	return fset.Arg(0), 0, true
}

// onResumed runs f on the lock that token holds on key, and returns the
// exit status: 0, 1 if the token does not hold it, 64 or 69.
func onResumed(ctx context.Context, redisURL, verb, key, token string, stderr io.Writer, f func(*padlock.Lock) error) int {
	locks, done, code := client(redisURL, verb, stderr)
	if locks == nil {
		return code
	}
	defer done()
	lock, err := locks.Resume(ctx, key, token)
	if err == nil {
		err = f(lock)
	}
	if errors.Is(err, padlock.ErrNotHeld) {
		fmt.Fprintf(stderr, "padlock %s: %s is not held by token %s\n", verb, key, token)
		return 1
	}
	code, _ = failure(verb, key, err, stderr)
	return code
}

// failure reports err on stderr and returns the exit status for it, and
// whether there was one.
func failure(verb, key string, err error, stderr io.Writer) (int, bool) {
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, padlock.ErrInvalid):
		fmt.Fprintf(stderr, "padlock %s: %v\n", verb, err)
		return exitUsage, true
	}
	fmt.Fprintf(stderr, "padlock: cannot %s %s: %v\n", verb, key, err)
	return exitUnavailable, true
}

// isSet reports whether the flag name was given.
func isSet(fset *flag.FlagSet, name string) bool {
	set := false
	fset.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// shellQuote quotes s for a POSIX shell: in single quotes, each ' written
// as '\”.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
