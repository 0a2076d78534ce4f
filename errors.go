package padlock

import "errors"

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
)
