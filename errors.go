package padlock

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/padlock-go/padlock/driver"
)

// Sentinel errors. Test for them with errors.Is: an error returned by this
// package may wrap one of them together with a cause (a context's error, a
// Redis error, or the function's error in Do).
var (
	// ErrNotAcquired reports that the lock is held by someone else: by
	// TryAcquire after its single attempt, and by Acquire when its context
	// ended while the lock was still held (joined with the context's error).
	ErrNotAcquired = errors.New("padlock: lock not acquired")

	// ErrNotHeld reports that a Lock is no longer ours: it was released,
	// it expired, or it was deleted or taken over in Redis. Release, Extend
	// and TTL return it and change nothing in Redis.
	ErrNotHeld = errors.New("padlock: lock not held")

	// ErrLost is the cause of a KeepAlive context, and part of Do's error,
	// when the lock was lost while it was being kept alive: Redis said the
	// lock is no longer ours, or Redis could not be reached before the
	// lock's local deadline.
	ErrLost = errors.New("padlock: lock lost")

	// ErrInvalid reports bad input: an empty key, a ttl under a
	// millisecond or over the longest padlock passes to Redis (about 292
	// years: the largest whole number of milliseconds a time.Duration
	// holds), a nil client, context or function, a zero Lock, a method
	// called on a nil *Client. A call that returns it has not touched
	// Redis.
	ErrInvalid = errors.New("padlock: invalid argument")

	// ErrNotReplicated reports that fewer replicas than WithReplicas asked
	// for acknowledged an acquire or extend in time; the lock was released.
	ErrNotReplicated = errors.New("padlock: not replicated")

	// ErrClosed reports a call on a Client after Close (one that would
	// take, wait for, extend or keep alive a lock: it makes no round trip
	// and takes nothing; see Client.Close), or a wait that Close ended.
	ErrClosed = errors.New("padlock: client closed")

	// ErrUnsupported reports a server or client padlock cannot run on:
	// Redis before 6.0 (padlock needs Redis 6.0 or later, or Valkey 7.2 or
	// later), where the first call that reaches it returns it and changes
	// nothing there; or a *redis.Ring (see New), where every call does.
	ErrUnsupported = errors.New("padlock: unsupported")

	// ErrMaxHold reports that a lock taken WithMaxHold has been held for
	// its maximum: together with ErrLost, it is the cause of the
	// KeepAlive context (and part of Do's error) when keeping it alive
	// stopped there; Extend past it returns it and changes nothing.
	ErrMaxHold = errors.New("padlock: held for its maximum")

	// ErrOutOfMemory reports that Redis refused a write for want of
	// memory: used memory is over maxmemory and the maxmemory-policy
	// (noeviction, or nothing left to evict) refuses writes with OOM. The
	// error wraps Redis's; nothing was taken. Raise maxmemory or free
	// memory. (A read-only replica's refusal, READONLY, has no sentinel:
	// a failover shows it for a moment too; its error says to point
	// padlock at the primary, and wraps Redis's.)
	ErrOutOfMemory = errors.New("padlock: redis out of memory")
)

// unsupportedReply is what padlock's scripts answer on a server older
// than Redis 6.0 (see lua/acquire.lua).
const unsupportedReply = "PADLOCK_UNSUPPORTED_SERVER"

// aclHint is added to a NOPERM error from Redis: what the user lacks, and
// where the rule it needs is written down.
const aclHint = "the Redis user may not use this lock's keys (the key and keys beginning with it), its channel (named like the key), " +
	"or one of padlock's commands; see \"Redis servers and ACL users\" in padlock's README for the rule it needs"

// isPermissionError reports whether msg is Redis refusing a command for
// want of an ACL permission: NOPERM for the command sent, and the forms
// that Redis 6 and 7 and Valkey give for a command inside a script.
func isPermissionError(msg string) bool {
	for _, s := range [...]string{"NOPERM", "ACL failure", "can't run this command", "no permissions to", "can't access"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// Hints added to an error reply of Redis, in padlock's words.
const (
	oomHint      = "Redis is out of memory (used memory is over maxmemory, and its maxmemory-policy refuses writes): raise maxmemory or free memory"
	readOnlyHint = "the Redis at this address is a read-only replica: point padlock at the primary"
)

// opError wraps err, an error of operation op on key (a key, or the keys
// of a multi-key lock), as padlock returns it: a server too old for
// padlock matches ErrUnsupported, and an error reply of Redis is said in
// padlock's words first (see reword).
func opError(op string, key any, err error) error {
	if strings.Contains(err.Error(), unsupportedReply) {
		return fmt.Errorf("padlock: %s %q: %w server: padlock needs Redis 6.0 or later, or Valkey 7.2 or later", op, key, ErrUnsupported)
	}
	return fmt.Errorf("padlock: %s %q: %w", op, key, reword(err))
}

// A replyError is an error reply of Redis as padlock words it: what is
// wrong and what to do, where padlock knows (out of memory, a read-only
// replica, a refused permission), then Redis's words without the script
// location, which comes last, in a sentence of its own. It wraps the
// reply as the driver returned it (so errors.As finds the go-redis or
// driver error, location and all) and a sentinel where one fits.
type replyError struct {
	text string
	errs []error
}

func (e *replyError) Error() string   { return e.text }
func (e *replyError) Unwrap() []error { return e.errs }

// reword returns err, if it is an error reply of Redis (its text ends
// with the reply's, on one line), as a replyError; else (nil, a network
// error, a timeout, errors joined, one already reworded) err itself.
func reword(err error) error {
	var done *replyError
	if err == nil || errors.As(err, &done) {
		return err
	}
	reply, ok := driver.Error(err)
	if msg := err.Error(); !ok || strings.Contains(msg, "\n") || !strings.HasSuffix(msg, string(reply)) {
		return err
	}
	said, where := scriptless(string(reply))
	e := &replyError{text: said, errs: []error{err}}
	switch {
	case strings.Contains(said, "OOM command not allowed"):
		e.text = oomHint + " (" + said + ")"
		e.errs = append(e.errs, ErrOutOfMemory)
	case strings.HasPrefix(said, "READONLY") || strings.Contains(said, "read only replica"):
		e.text = readOnlyHint + " (" + said + ")"
	case isPermissionError(said):
		e.text = said + " (" + aclHint + ")"
	}
	if where != "" {
		e.text += ". " + where
	}
	return e
}

// Where an error reply of a script says it came from: Redis 7 and later,
// and Valkey, end it with "script: SHA, on @user_script:LINE."; Redis 6
// begins it with "ERR Error running script (call to f_SHA):
// @user_script:LINE: ", then "@user_script: LINE: -" and the reply of the
// command the script called, or Lua's error.
var (
	scriptAfter  = regexp.MustCompile(`^(.*?)\s*script: ([0-9a-f]{40}), on @user_script:(\d+)\.?\s*$`)
	scriptBefore = regexp.MustCompile(`^ERR Error running script \(call to f_([0-9a-f]{40})\): @user_script:(\d+): (?:@user_script: \d+: -?)?(.*?)\s*$`)
	luaLine      = regexp.MustCompile(`\buser_script:\d+: `)
)

// scriptless splits msg, an error reply, into what Redis said, without a
// trailing period, and where in which of padlock's scripts it came from
// ("" if not from a script).
func scriptless(msg string) (said, where string) {
	said = msg
	if m := scriptAfter.FindStringSubmatch(msg); m != nil {
		said, where = m[1], fmt.Sprintf("From padlock's script %s, line %s", m[2], m[3])
	} else if m := scriptBefore.FindStringSubmatch(msg); m != nil {
		said, where = m[3], fmt.Sprintf("From padlock's script %s, line %s", m[1], m[2])
	}
	said = luaLine.ReplaceAllString(said, "")
	return strings.TrimRight(said, ". "), where
}
