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
	v := newVerb("acquire", "padlock acquire [flags] KEY",
		"Takes the lock KEY and prints 'export' lines of PADLOCK_KEY, PADLOCK_TOKEN and,\n"+
			"with -fence, PADLOCK_FENCE, for eval \"$(padlock acquire KEY)\": a later\n"+
			"'padlock extend' or 'padlock release' in the same shell finds the token there.\n"+
			"The lock is not renewed: it expires after -ttl unless extended or released.",
		"  0      the lock is taken; its variables are printed\n"+exitUsageHelp+exitRedisHelp+
			"  75     the lock is held elsewhere; nothing is printed\n", stdout, stderr)
	rf := addRedisFlags(v.fset)
	ttl := v.fset.Duration("ttl", 10*time.Minute, "lock TTL")
	lf := addLockFlags(v.fset)
	shared := v.fset.Bool("shared", false, "take a shared hold: many holders, no exclusive one")
	token := v.fset.String("token", "", "use this token instead of a random one (a job or pipeline id)")
	if code, ok := v.parse(args); !ok {
		return code
	}
	key, code, ok := v.key()
	switch {
	case !ok:
		return code
	case *ttl < time.Millisecond:
		return v.usageError("-ttl %v is under 1ms", *ttl)
	}
	c, err := rf.conn()
	if err != nil {
		return v.usageError("%v", err)
	}
	opts, code, ok := lf.options(v)
	switch {
	case !ok:
		return code
	case *shared && *lf.limit > 0:
		return v.usageError("-limit and -shared cannot go together")
	case *shared:
		opts = append(opts, padlock.WithShared())
	}
	if isSet(v.fset, "token") {
		opts = append(opts, padlock.WithToken(*token))
	}
	locks, done, code := v.client(c)
	if locks == nil {
		return code
	}
	defer done()
	lock, status := v.acquire(ctx, locks, c, key, *ttl, *lf.wait, opts, nil)
	if lock == nil {
		return status
	}
	fmt.Fprintf(stdout, "export PADLOCK_KEY=%s\nexport PADLOCK_TOKEN=%s\n", shellQuote(lock.Key()), shellQuote(lock.Token()))
	if *lf.fence {
		fmt.Fprintf(stdout, "export PADLOCK_FENCE=%d\n", lock.Fence())
	}
	return 0
}

// tokenExits are the exit statuses of extend and release, for their -h.
const tokenExits = "  0      done\n  1      the token does not hold KEY\n" + exitUsageHelp + exitRedisHelp

// extendCmd is 'padlock extend'.
func extendCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	v := newVerb("extend", "padlock extend -ttl D [-token T] KEY",
		"Sets the lock KEY, held by the token, to expire D from now.", tokenExits, stdout, stderr)
	rf := addRedisFlags(v.fset)
	ttl := v.fset.Duration("ttl", 0, "the new TTL (required)")
	token := tokenFlag(v.fset)
	key, c, code, ok := v.tokenArgs(args, rf, token)
	switch {
	case !ok:
		return code
	case !isSet(v.fset, "ttl"):
		return v.usageError("-ttl is required")
	case *ttl < time.Millisecond:
		return v.usageError("-ttl %v is under 1ms", *ttl)
	}
	return v.onResumed(ctx, c, key, *token, "extend", func(ctx context.Context, lock *padlock.Lock) error {
		return lock.Extend(ctx, *ttl)
	})
}

// releaseCmd is 'padlock release'.
func releaseCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	v := newVerb("release", "padlock release [-token T] KEY",
		"Releases the lock KEY held by the token (the next waiter gets it).", tokenExits, stdout, stderr)
	rf := addRedisFlags(v.fset)
	token := tokenFlag(v.fset)
	key, c, code, ok := v.tokenArgs(args, rf, token)
	if !ok {
		return code
	}
	return v.onResumed(ctx, c, key, *token, "release", func(ctx context.Context, lock *padlock.Lock) error {
		return lock.Release(ctx)
	})
}

// breakCmd is 'padlock break'. It exits 0 whether or not anything held
// KEY.
func breakCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	v := newVerb("break", "padlock break [-redis URL] [-timeout D] KEY",
		"Ends whatever holds the lock KEY (every holder of a semaphore or shared hold),\n"+
			"advances its fencing counter, and serves its waiters. For a stuck lock: its\n"+
			"holder finds out at its next renewal, extend or release.",
		"  0      done, whether or not anything held KEY\n"+exitUsageHelp+exitRedisHelp, stdout, stderr)
	rf := addRedisFlags(v.fset)
	key, c, code, ok := v.keyAndConn(args, rf)
	if !ok {
		return code
	}
	locks, done, code := v.client(c)
	if locks == nil {
		return code
	}
	defer done()
	ctx, cancel := c.call(ctx)
	defer cancel()
	info, err := locks.Break(ctx, key)
	if err != nil {
		return v.fail("break "+key, c, err)
	}
	switch {
	case !info.Held:
		fmt.Fprintf(stdout, "%s: nobody held it; nothing changed\n", key)
	case info.Kind == "lock":
		fmt.Fprintf(stdout, "%s: broke the lock of %s (token %s, %s)\n", key, orNone(info.Metadata), info.Token, left(info.TTL))
	default:
		fmt.Fprintf(stdout, "%s: broke %d holders of a %s\n", key, len(info.Holders), info.Kind)
		for _, h := range info.Holders {
			fmt.Fprintf(stdout, "  %s (token %s, %s)\n", orNone(h.Metadata), h.Token, left(h.TTL))
		}
	}
	if info.Held && info.Fence > 0 {
		fmt.Fprintf(stdout, "  fence counter: %d -> %d\n", info.Fence, info.Fence+1)
	}
	return 0
}

// tokenFlag adds -token, by default $PADLOCK_TOKEN.
func tokenFlag(fset *flag.FlagSet) *string {
	return fset.String("token", "", "the lock's token (default $PADLOCK_TOKEN)")
}

// keyAndConn parses the verb's flags and returns its one argument, KEY,
// and where Redis is; or false and the exit status.
func (v *verb) keyAndConn(args []string, rf redisFlags) (string, conn, int, bool) {
	if code, ok := v.parse(args); !ok {
		return "", conn{}, code, false
	}
	key, code, ok := v.key()
	if !ok {
		return "", conn{}, code, false
	}
	c, err := rf.conn()
	if err != nil {
		return "", conn{}, v.usageError("%v", err), false
	}
	return key, c, 0, true
}

// tokenArgs parses the flags of extend and release, and returns the key
// and where Redis is, with the token in *token; or false and the exit
// status.
func (v *verb) tokenArgs(args []string, rf redisFlags, token *string) (string, conn, int, bool) {
	key, c, code, ok := v.keyAndConn(args, rf)
	if !ok {
		return "", conn{}, code, false
	}
	if !isSet(v.fset, "token") {
		*token = os.Getenv("PADLOCK_TOKEN")
	}
	if *token == "" {
		return "", conn{}, v.usageError("no token: pass -token or set PADLOCK_TOKEN"), false
	}
	return key, c, 0, true
}

// onResumed runs f on the lock that token holds on key, and returns the
// exit status: 0, 1 if the token does not hold it, 64 or 69. what names
// f's work in messages.
func (v *verb) onResumed(ctx context.Context, c conn, key, token, what string, f func(context.Context, *padlock.Lock) error) int {
	locks, done, code := v.client(c)
	if locks == nil {
		return code
	}
	defer done()
	ctx, cancel := c.call(ctx)
	defer cancel()
	lock, err := locks.Resume(ctx, key, token)
	if err == nil {
		err = f(ctx, lock)
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, padlock.ErrNotHeld):
		fmt.Fprintf(v.stderr, "padlock %s: %s is not held by token %s\n", v.name, key, token)
		return 1
	}
	return v.fail(what+" "+key, c, err)
}

// shellQuote quotes s for a POSIX shell: in single quotes, each ' written
// as '\”.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
