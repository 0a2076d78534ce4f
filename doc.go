// Package padlock provides distributed locks on Redis for Go services that
// run as several instances: only one instance at a time runs a job or
// touches a resource.
//
//	locks := padlock.New(rdb) // rdb: a go-redis client
//	err := locks.TryDo(ctx, "lock:report:daily", 2*time.Minute, runReport)
//
// New takes a go-redis client; NewDriver takes any other Redis client that
// an adapter wraps in a driver.Driver (see package driver), with the same
// promises.
//
// # What is guaranteed
//
// On one Redis server (or one primary), while a lock's ttl has not run out,
// at most one Lock holds it. Every lock has a ttl, so a holder that dies
// frees it when the ttl runs out. Only the holder of a lock's random token
// (122 random bits from crypto/rand, unless chosen) can release or extend it: Release, Extend and
// TTL compare the token inside one Lua script, and never touch another
// holder's lock; Extend never brings back a lock that has expired. TryAcquire,
// Release, Extend and TTL cost one round trip each; when more than 8 of a
// Client's run at once on one node, those that come wait and go together
// in one pipeline as soon as one is back, each script still running as it
// would alone. WithToken lets the
// caller choose the token (a job id), Client.Resume picks a lock up by its
// token in another process, and Client.Break ends a stuck lock for an
// operator, advancing its fence counter.
//
// Acquire waits without polling, and a lock changes hands in one round
// trip. Every kind of lock (a lock, a semaphore's place, a shared hold,
// several keys) waits the same way: a waiter queues a ticket in Redis
// (first come, first served across processes), which its Client renews
// with its other renewals; whatever frees capacity hands it to the
// tickets at the head of the queue in the same script, and tells their
// Clients (the releasing Client's own in the reply). A waiter whose
// process died is skipped when its ticket lapses, within 5 seconds. A
// waiter whose wait ends as the lock comes to it passes it on. Redis is the
// truth, the messages hints: a key freed by anything else (a DEL by hand,
// another library's release, eviction, FLUSHALL, a shortened TTL) is seen
// by the Client's watch of the keys its waiters wait for, through Redis's
// invalidations (CLIENT TRACKING, on a connection per node; on rueidis and
// valkey-go, the pub/sub one where it can),
// within milliseconds, or by reading them every 100ms where tracking
// cannot be had; and at the latest by the tickets' renewal, which looks
// at the keys too, within a renewal period (2.5s for a TTL of 5s or
// more). Client.Check says which path a Client takes. TryAcquire
// does not queue: it takes a lock only when it is free. Redlock and keys
// with a brace but no hash tag cannot queue in Redis: they wait in the
// same loop inside their Client only, where a release is announced on the
// key's channel and the Client's first waiter attempts.
// Its attempts share one token, so an attempt whose reply was lost and that
// go-redis sends again finds its own lock and succeeds. A call that fails
// never leaves the lock held: when it cannot tell whether an attempt took
// the lock (a timeout, a cancelled context), it releases it again (unless
// its token was chosen with WithToken, which may have held the key before).
//
// KeepAlive holds a lock as a lease for a long job: the Client's renewal
// scheduler (one goroutine per Client, whatever the number of leases, and
// one pipeline for the renewals that fall due together) renews the lock
// about every ttl/3 and cancels its context with cause ErrLost the moment
// Redis says the lock is not ours, or, when Redis cannot be reached, at the
// lock's local deadline: the monotonic time the last successful acquire or
// extend was sent, plus the ttl, minus 1% of the ttl and 2ms for clock
// drift (Lock.Deadline). Do and TryDo wrap acquire, keep-alive and release
// around a function.
//
// WithMaxHold caps a lease: renewing stops that long after the lock was
// taken, so a holder that hangs lets the others in (ErrMaxHold). WithMinHold
// is the other end: the lock is not freed before that long after it was
// taken, however soon it is released, which makes TryDo on every
// instance's tick run a job at most once per interval; the minimum is kept
// in Redis, by Redis's clock.
//
// With WithFencing, every acquire also increments a counter that never
// expires, and Lock.Fence returns it: strictly increasing per key. Storage
// that rejects writes with a fence lower than one it has seen is safe even
// when a holder's lock expired while it was paused (GC, swap, a slow
// network): such a holder cannot know it has lost the lock, and a lock
// alone cannot stop its late write. Fencing can.
//
// TryAcquireMany and AcquireMany take several keys at once, all or none.
// WithReplicas waits for replicas after every write of a lock, and
// NewRedlock spreads a lock over several independent primaries; the README
// compares the topologies.
//
// WithLimit(n) makes a key a counting semaphore (up to n holders at once),
// and WithShared takes a shared hold of a reader-writer lock (any number
// of shared holders, or one exclusive holder; first come, first served).
// Each holder gets a Lock of its own, with the same guarantees.
//
// Client.Campaign, Leader, Observe and Lead elect one leader among the
// instances: a fenced lock kept alive, whose fence is the leader's term and
// whose metadata is the value everyone reads.
//
// Release ignores the cancellation of its context, so that
// defer lock.Release(ctx) with a request's context is safe, and a release
// that cannot reach Redis is retried in the background until it lands or
// the lock expires.
//
// WithObserver attaches hooks to every acquire, wait, release, renewal and
// loss, WithLogger logs what an operator should know through log/slog, and
// the padlockotel module reports OpenTelemetry metrics and spans
// (padlockprom, Prometheus's). Client.Inspect reads one lock as Redis holds
// it, Client.Locks every lock of the deployment whose key matches a glob
// (who holds it, for how long, its fence and waiters), and Client.Local
// what this Client holds and waits for, without a round trip; the
// padlockweb package serves both as a web page. Redis 6.0
// and later and Valkey 7.2 and later are supported; every key padlock
// writes for a lock begins with the lock's key, so one ACL key pattern
// covers it (the README gives the minimal rule).
//
// # What is not guaranteed
//
// A lock is only as durable as the Redis that holds it. If Redis restarts
// without persistence, every lock and fence counter is gone: another caller
// can take a lock that a KeepAlive still believes held (until its next
// renewal reports ErrLost), and fences start again at 1. With replication,
// a failover to a replica that had not yet received a lock loses it the same
// way. Use persistence (appendfsync always) where that matters, and fencing
// where correctness, not just efficiency, depends on the lock.
//
// Expiry is measured by Redis's clock and deadlines by the holder's
// monotonic clock; the margin covers drift between them of up to 1% of the
// ttl. A process paused for longer than the time left on its lock loses it
// without noticing until it runs again.
//
// go-redis honours context deadlines during I/O only with
// redis.Options.ContextTimeoutEnabled; otherwise a call against an
// unresponsive server returns after its ReadTimeout. padlock's loss signal
// does not depend on either: it is a timer.
//
// docs/SAFETY.md in the repository lists the faults padlock is tested
// against, what it does under each, and what the caller must do;
// docs/INTERNALS.md says how the code keeps its promises.
//
// The padlocktest package tests code that uses padlock: a Client on a lock
// server in the test's process (or a real redis-server), and the faults to
// throw at a holder (Expire, Steal, Down, FastForward).
//
// # Errors
//
// TryAcquire and Acquire return ErrNotAcquired when someone else holds the
// lock; Release, Extend and TTL return ErrNotHeld when the lock is no longer
// ours; ErrLost is the cause of a KeepAlive context when the lock was lost
// (with ErrMaxHold when it was held for its WithMaxHold);
// ErrInvalid reports bad input (an empty key, a ttl under 1ms, a nil
// client). Redis errors are wrapped, never reported as one of these. Match
// them with errors.Is.
package padlock
