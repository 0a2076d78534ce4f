package padlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/padlock-go/padlock/driver"
)

// lockExtra holds the settings of a lock that most locks do not have, to
// keep the common Lock small (a service may keep thousands alive).
type lockExtra struct {
	many           []string      // the keys of a multi-key lock (TryAcquireMany)
	replicas       int           // WithReplicas: replicas to wait for after each write
	replicaTimeout time.Duration // and for how long
	count          *counting     // WithLimit, WithShared: a place among several holders
	obs            *Observer     // WithObserver: told what the lock does
	acquiredAt     time.Time     // with obs: when the acquire succeeded; under mu
	holdEnded      bool          // with obs: HoldEnd was called; under mu
	chosen         bool          // WithToken: its token is the caller's, and never changes
	maxHold        time.Duration // WithMaxHold: kept alive only this long after it was taken
	minHold        time.Duration // WithMinHold: Redis keeps it at least this long after it was taken
	taken          bool          // took was called: holds are fixed; under mu
	holds          holdBounds    // where its WithMaxHold and minimum end; under mu until the Lock is returned, fixed then
	turns          *turnState    // on a Redlock: how its calls take turns on the nodes (see nodeTurns)
	proclaimed     *string       // a leadership's value, once Proclaim changed it (see Client.Local); under mu
}

// holdBounds are where a held lock's WithMaxHold and its minimum end, on
// this process's monotonic clock, fixed when it was taken (see took). A
// Lock's local deadline, and its lease's in the scheduler, derive from
// them and the last acquire or extend (see deadline), and so does its cap.
type holdBounds struct {
	capAt    time.Time // WithMaxHold: no renewal from then on (zero: no cap)
	minUntil time.Time // Redis keeps it for a minimum until no earlier (zero: none)
}

// deadline is the local deadline of a lock whose last successful acquire
// or extend was sent at sent with ttl: its ttl from then, less a drift, or
// the end of its minimum, whichever is later.
func (h holdBounds) deadline(sent time.Time, ttl time.Duration) time.Time {
	return latest(sent.Add(ttl-drift(ttl)), h.minUntil)
}

// capped reports whether a lock with these bounds is held for its
// WithMaxHold at now: it is not renewed any more.
func (h holdBounds) capped(now time.Time) bool {
	return !h.capAt.IsZero() && !now.Before(h.capAt)
}

// took records that l was taken, and fixes its holdBounds: its WithMaxHold
// counts from at, the moment it was taken as seen here (the acquire's
// send, a grant's arrival, Resume's send); Redis keeps it for kept (its
// WithMinHold, or what Resume read is left of it) from no earlier than
// from (the acquire's send, the last moment a waiter was known queued
// before its grant). Only the first take counts, unless it is forgotten
// (see untake). l.mu must be held, or l not yet shared.
func (l *Lock) took(from, at time.Time, kept time.Duration) {
	x := l.x
	if x == nil || x.taken {
		return
	}
	x.taken = true
	if x.maxHold > 0 {
		x.holds.capAt = at.Add(x.maxHold)
	}
	if kept > 0 {
		x.holds.minUntil = from.Add(kept - drift(kept))
	}
}

// untake forgets l's take, if any: an attempt of its Acquire did not get
// the lock (a take whose reply came too late was undone; a grant was not
// confirmed), so the take that gets it fixes its holdBounds afresh.
func (l *Lock) untake() {
	if l.x == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.x.taken, l.x.holds = false, holdBounds{}
}

// bounds is x's holdBounds (none for a nil x). Once its Lock is returned
// to the caller they are fixed; before, its mu must be held.
func (x *lockExtra) bounds() holdBounds {
	if x == nil {
		return holdBounds{}
	}
	return x.holds
}

// pastMaxHold returns the error of Extend on a lock held for its
// WithMaxHold, or nil.
func (l *Lock) pastMaxHold() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.x.bounds().capped(time.Now()) {
		return nil
	}
	return fmt.Errorf("%w: %q: taken with WithMaxHold(%v), which has passed", ErrMaxHold, l.key, l.x.maxHold)
}

// chosenToken reports whether l's token was chosen with WithToken.
func (l *Lock) chosenToken() bool { return l.x != nil && l.x.chosen }

// multi returns the keys of a multi-key lock, or nil.
func (l *Lock) multi() []string {
	if l.x == nil {
		return nil
	}
	return l.x.many
}

// replicaCount is the number of replicas to wait for (WithReplicas), or 0.
func (l *Lock) replicaCount() int {
	if l.x == nil {
		return 0
	}
	return l.x.replicas
}

// lockState is where a Lock is in its life, in order: it only moves on.
type lockState uint8

const (
	stateHeld      lockState = iota // acquired (as far as it knows): it may be kept alive
	stateReleasing                  // Release was called: no keep-alive may start
	stateRetrying                   // its release could not reach Redis: the scheduler sends it again
	stateReleased                   // released, or found not ours
)

// A Lock is a lock taken in Redis by TryAcquire or Acquire. Its methods are
// safe for concurrent use. The zero Lock, or a nil *Lock, holds nothing:
// its methods return ErrInvalid.
type Lock struct {
	c      *Client
	key    string
	value  string     // what the key holds: the token, then " " and metadata if any
	keys   [4]string  // the key, its queue, its fence key, its minimums, or "" (see keys.go)
	x      *lockExtra // what few locks need, or nil
	args   [2]any     // the value and the acquire ttl, boxed once: script arguments
	acqCmd []any      // the acquire script's EVALSHA, built once (see evalsha)

	// extendMu serializes Extend round trips, the caller's and the
	// scheduler's, so the local deadline follows the last one Redis ran.
	extendMu sync.Mutex

	mu        sync.Mutex
	fence     int64
	ttl       time.Duration // the ttl of the last successful acquire or extend
	sent      time.Time     // when that acquire or extend was sent (monotonic)
	state     lockState     // held, being released, its release retried, or released
	lost      error         // why the lock was lost, once it was
	lease     *lease        // in the Client's scheduler while kept alive
	regs      []*keepAlive  // the active KeepAlive calls
	keptAlive bool          // KeepAlive was ever called
	since     time.Time     // when it was acquired (see Client.Local)

	// In the Client's holds (see holdList), under its mu.
	prev, next *Lock
	listed     bool
}

// Key returns the Redis key of the lock, as given to TryAcquire or Acquire.
func (l *Lock) Key() string {
	if l == nil {
		return ""
	}
	return l.key
}

// Token returns the lock's token: the one chosen with WithToken, or else
// a random one, 122 bits from crypto/rand as a UUIDv4 string. Only the
// holder of the token can release or extend the lock; Client.Resume picks
// the lock up by its token in another Client or process.
func (l *Lock) Token() string {
	if l == nil {
		return ""
	}
	return l.tok()
}

// tok is the token: the value up to its first space.
func (l *Lock) tok() string {
	tok, _ := splitValue(l.value)
	return tok
}

// Metadata returns the string stored with the lock by WithMetadata, or "".
func (l *Lock) Metadata() string {
	if l == nil {
		return ""
	}
	_, meta := splitValue(l.value)
	return meta
}

// Fence returns the lock's fencing token: with WithFencing, a number > 0
// that is strictly greater than that of every earlier holder of the key;
// without it, 0. Pass it with every write the lock protects, and have the
// storage reject a write whose fence is lower than one it has seen.
func (l *Lock) Fence() int64 {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fence
}

// Deadline returns the local estimate of when the lock expires in Redis:
// the time the last successful acquire or extend was sent, plus its ttl,
// minus a margin for clock drift (1% of the ttl plus 2ms); or, if later,
// the end of the minimum Redis keeps it for (WithMinHold, counted from
// the acquire's send; on a Lock from Resume, what Redis said was left of
// it, counted from Resume's send), less the same margin. It is measured
// on the monotonic clock, and is never later than the real expiry while
// clocks drift less than the margin. It does not contact Redis.
func (l *Lock) Deadline() time.Time {
	if l == nil {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline()
}

// deadline is Deadline with l.mu held.
func (l *Lock) deadline() time.Time { return l.x.bounds().deadline(l.sent, l.ttl) }

// drift is the safety margin taken off a ttl for the local deadline.
func drift(ttl time.Duration) time.Duration {
	return ttl/100 + 2*time.Millisecond
}

// usable returns ErrInvalid for a nil or zero Lock, or a nil ctx.
func (l *Lock) usable(ctx context.Context) error {
	switch {
	case l == nil || l.c == nil:
		return fmt.Errorf("%w: nil or zero Lock", ErrInvalid)
	case ctx == nil:
		return fmt.Errorf("%w: nil context", ErrInvalid)
	}
	return nil
}

func (l *Lock) notHeld() error {
	return fmt.Errorf("%w: %q", ErrNotHeld, l.key)
}

// Release deletes the lock in Redis if it is still ours, in one round trip,
// and stops any KeepAlive of the lock first (waiting for it to exit). It
// blocks until Redis answers.
//
// Release ignores the cancellation of ctx but keeps its values (trace
// spans, say): a ctx that is already done, or ends during the call, still
// has the lock released, so `defer lock.Release(ctx)` with a request's
// context is safe. Its round trip waits until ctx's deadline (unless ctx
// has already ended) or for two seconds, whichever is later, and never past
// the lock's local deadline
// (see Deadline); with a ctx that cannot end (context.Background), as long
// as the Redis client waits (go-redis: its ReadTimeout). After the local deadline the lock has
// expired in Redis, so Release returns at once, an error matching
// ErrNotHeld, and sends nothing.
//
// It returns nil if the lock was ours and is now deleted (and handed to
// the first waiter, if clients wait), and an error that matches ErrNotHeld
// if it was not ours any more (expired, deleted or taken by someone else;
// another holder's lock is never touched), including on a second Release.
// If the reply to a successful release is lost and the Redis client sends
// the release again, the retry finds the lock gone and Release reports
// ErrNotHeld: either way the lock is no longer this Lock's, and nothing
// needs undoing.
//
// When Redis cannot be reached (a network error, a timeout, a server that
// is restarting), Release returns that error wrapped, and the Client keeps
// sending the same compare-and-delete in the background, with backoff,
// until one lands or the lock's local deadline passes, so the lock does
// not stay held until its ttl runs out. Those retries are sent together,
// one at a time, by the Client's background work beside its renewals, not
// by a goroutine each; Close abandons them.
// Release may also be called again.
func (l *Lock) Release(ctx context.Context) error {
	if err := l.usable(ctx); err != nil {
		return err
	}
	obs := l.observer()
	if obs == nil {
		return l.releaseLock(ctx)
	}
	if obs.ReleaseStart != nil {
		ctx = obs.ReleaseStart(ctx, l.key)
	}
	err := l.releaseLock(ctx)
	if obs.ReleaseDone != nil {
		obs.ReleaseDone(ctx, ReleaseDoneInfo{Key: l.key, Err: err})
	}
	return err
}

// releaseLock is Release once its arguments are checked.
func (l *Lock) releaseLock(ctx context.Context) error {
	l.mu.Lock()
	if l.state == stateHeld {
		l.state = stateReleasing
	}
	released := l.state == stateReleased
	d := l.stopKeepAlives(context.Canceled)
	deadline := l.deadline()
	l.mu.Unlock()
	l.settle(d).wait()
	if released {
		return l.notHeld()
	}
	left := time.Until(deadline)
	if left <= 0 {
		l.markReleased(false)
		return fmt.Errorf("%w: %q: its local deadline has passed, so it has expired", ErrNotHeld, l.key)
	}
	rctx, cancel := releaseContext(ctx, left)
	defer cancel()
	n, err := l.release(rctx, false, false)
	if err != nil {
		if retryable(err) {
			l.mu.Lock()
			if l.state != stateReleased {
				l.state = stateRetrying
			}
			l.mu.Unlock()
			l.c.sched.retryRelease(l, deadline)
		}
		return opError("release", l.key, err)
	}
	l.markReleased(false)
	if n == 0 {
		return l.notHeld()
	}
	return nil
}

// releaseContext returns the context of a Release's round trip: ctx's
// values but not its cancellation, and a deadline: ctx's (unless ctx has
// ended) or releaseTimeout from now, whichever is later, and never past
// left, the time to the lock's local deadline. A ctx that cannot end is used as it is.
func releaseContext(ctx context.Context, left time.Duration) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil {
		return ctx, func() {}
	}
	wait := releaseTimeout
	if d, ok := ctx.Deadline(); ok && ctx.Err() == nil {
		wait = max(wait, time.Until(d))
	}
	return context.WithTimeout(context.WithoutCancel(ctx), min(wait, left))
}

// releaseTimeout bounds a Release's round trip, and each background retry
// of a release that could not reach Redis.
const releaseTimeout = 2 * time.Second

// markReleased records that l is released (or found not ours), and drops
// any background retry of its release; bg says the Client's background
// work calls it.
func (l *Lock) markReleased(bg bool) {
	l.mu.Lock()
	retrying := l.state == stateRetrying
	l.state = stateReleased
	l.mu.Unlock()
	l.c.holds.remove(l)
	if retrying {
		l.c.sched.dropRelease(l)
	}
	l.holdEnded(false, nil, bg)
}

// retryable reports whether a release that failed with err is worth
// sending again: Redis could not be reached or answer (a network error, a
// timeout), or answered that it cannot serve now (loading its data after a
// restart, a cluster or failover in progress, a slot moving: redirects the
// client gave up following, TRYAGAIN, which the scripts also answer
// before their first write where a moving slot would stop them later). An
// error reply of any other kind (a refused permission, say) would fail
// again, as would anything sent through a client that was closed.
func retryable(err error) bool {
	if errors.Is(err, driver.ErrClosed) {
		return false // the client was closed: no retry can land
	}
	if !isRedisError(err) {
		return true
	}
	for _, prefix := range [...]string{"LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "MOVED", "ASK"} {
		if driver.HasPrefix(err, prefix) {
			return true
		}
	}
	return false
}

// cleanup releases l after an acquire attempt whose outcome is unknown, on
// a context of its own so that it runs even when ctx has ended: an undo,
// which frees it at once, minimum (WithMinHold) or not. Its error is
// dropped: if Redis cannot be reached now, the ttl frees the lock.
func (l *Lock) cleanup(ctx context.Context) { l.releaseQuietly(ctx, true) }

// releaseQuietly releases l as cleanup does, an undo or not (a release,
// which keeps a minimum).
func (l *Lock) releaseQuietly(ctx context.Context, undo bool) {
	budget := cleanupTimeout
	if ctx.Err() != nil {
		budget = lateCleanupTimeout
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), budget)
	defer cancel()
	if _, err := l.release(rctx, false, undo); notSent(err) && budget < cleanupTimeout {
		// It waited behind other calls to the node, and never went:
		// send it in the background, with the whole budget.
		l.c.background(func() { l.releaseQuietly(context.WithoutCancel(ctx), undo) })
	}
}

// undo is cleanup after an acquire that failed with err (nil: its reply
// came too late), whose outcome is unknown, unless l's token is chosen:
// the token may have held the key before the call, which then only renewed
// it, or may hold it in another process, so what the call may have taken
// is left to the token's holders. It reports whether it releases: before
// it returns, or, if the call that failed is still in flight, in the
// background once it is done (see after).
func (l *Lock) undo(ctx context.Context, err error) bool {
	if l.chosenToken() {
		return false
	}
	l.c.after(ctx, err, l.cleanup)
	return true
}

// release runs the release script, and reports 1 if every key was still
// ours and is deleted, 0 if not (a multi-key lock with some keys no longer
// ours has the others deleted, and reports 0).
func (l *Lock) release(ctx context.Context, bg, undo bool) (int64, error) {
	if l.c.nodes != nil {
		return l.redlockRelease(ctx, undo)
	}
	var r doer = l.c.pipe
	if l.c.kind == driver.Cluster {
		// go-redis sends a Cluster node's whole pipeline again when its
		// first command answers TRYAGAIN (a script of two keys while the
		// slot migrates): a release that had run would run twice, and
		// report the lock not held.
		r = l.c.d
	}
	return l.releaseOn(ctx, r, bg, undo)
}

// Extend sets the lock to expire ttl from now, if it is still ours, in one
// round trip. It blocks until Redis answers or ctx is done. A later
// KeepAlive renews with this ttl.
//
// It returns an error that matches ErrNotHeld, and changes nothing, if the
// lock is not ours any more: it never brings back an expired lock. Any
// KeepAlive of the lock then ends with ErrLost. A ttl under 1ms, or over
// the longest padlock passes to Redis (see TryAcquire), returns
// ErrInvalid; other ttls are rounded up to whole milliseconds. On a lock
// of a closed Client it returns ErrClosed and makes no round trip. A
// Redis error is returned wrapped.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if err := l.usable(ctx); err != nil {
		return err
	}
	if err := l.c.open("extend", l.key); err != nil {
		return err
	}
	ttl, err := roundTTL(ttl)
	if err != nil {
		return err
	}
	err = l.extendLock(ctx, ttl)
	if obs := l.observer(); obs != nil && obs.Extend != nil {
		obs.Extend(ctx, ExtendInfo{Key: l.key, TTL: ttl, Err: err})
	}
	return err
}

// extendLock is Extend once its arguments are checked.
func (l *Lock) extendLock(ctx context.Context, ttl time.Duration) error {
	if l.isReleased() {
		return l.notHeld()
	}
	if err := l.pastMaxHold(); err != nil {
		return err
	}
	ok, err := l.extend(ctx, ttl)
	switch {
	case errors.Is(err, ErrNotReplicated):
		l.releaseQuietly(ctx, false) // it was held: a minimum stays
		l.lose(fmt.Errorf("%w: %w; released", ErrLost, err), false)
		return fmt.Errorf("%w; released", err)
	case err != nil:
		return opError("extend", l.key, err)
	case !ok:
		l.lose(fmt.Errorf("%w: %q: extend found it no longer ours", ErrLost, l.key), false)
		return l.notHeld()
	}
	return nil
}

// extend runs the extend script and, on success, moves the local deadline.
// It reports whether the lock was still ours.
func (l *Lock) extend(ctx context.Context, ttl time.Duration) (bool, error) {
	l.extendMu.Lock()
	defer l.extendMu.Unlock()
	if l.c.nodes != nil {
		return l.redlockExtend(ctx, ttl)
	}
	var sent time.Time
	var n int64
	script, keys, args := l.extendCall(ttl.Milliseconds())
	conn, err := l.onWriter(ctx, func(r doer) (err error) {
		sent = time.Now()
		n, err = asInt64(script.Run(ctx, r, keys, args...))
		return err
	})
	if conn != nil {
		defer conn.Close()
	}
	if err != nil || n != 1 {
		return false, err
	}
	if conn != nil {
		if err := l.replicated(ctx, conn); err != nil {
			return true, err
		}
	}
	l.extended(sent, ttl)
	return true, nil
}

func (l *Lock) isReleased() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state == stateReleased
}

// TTL returns how long the lock has left in Redis, in one round trip. It
// blocks until Redis answers or ctx is done.
//
// It returns an error that matches ErrNotHeld if the lock is not ours any
// more (any KeepAlive of the lock then ends with ErrLost), and a wrapped
// Redis error if Redis cannot answer. If someone removed the lock's expiry
// in Redis (PERSIST), it returns a negative duration and no error.
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) {
	if err := l.usable(ctx); err != nil {
		return 0, err
	}
	if l.isReleased() {
		return 0, l.notHeld()
	}
	var n int64
	var err error
	if l.c.nodes != nil {
		n, err = l.redlockTTL(ctx)
	} else {
		script, keys, args := l.pttlCall()
		n, err = asInt64(script.Run(ctx, l.c.d, keys, args...))
	}
	switch {
	case err != nil:
		return 0, opError("ttl", l.key, err)
	case n == -3:
		l.lose(fmt.Errorf("%w: %q: ttl found it no longer ours", ErrLost, l.key), false)
		return 0, l.notHeld()
	case n < 0:
		// Ours, but someone removed its expiry.
		return -1, nil
	}
	return time.Duration(n) * time.Millisecond, nil
}
