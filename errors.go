package padlock

import (
	"errors"
	"fmt"
	"strings"
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
	// millisecond, a nil client, context or function, a zero Lock. A call
	// that returns it has not touched Redis.
	ErrInvalid = errors.New("padlock: invalid argument")

	// ErrNotReplicated reports that fewer replicas than WithReplicas asked
	// for acknowledged an acquire or extend in time; the lock was released.
	ErrNotReplicated = errors.New("padlock: not replicated")

	// ErrClosed reports a call on a Client after Close, or a wait that
	// Close ended.
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

// opError wraps err, an error of operation op on key (a key, or the keys
// of a multi-key lock), as padlock returns it: a server too old for
// padlock matches ErrUnsupported, and a refusal for want of permission
// (NOPERM) says which permissions padlock needs.
func opError(op string, key any, err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, unsupportedReply):
		return fmt.Errorf("padlock: %s %q: %w server: padlock needs Redis 6.0 or later, or Valkey 7.2 or later", op, key, ErrUnsupported)
	case isPermissionError(msg):
		return fmt.Errorf("padlock: %s %q: %w (%s)", op, key, err, aclHint)
	}
	return fmt.Errorf("padlock: %s %q: %w", op, key, err)
}
