package padlock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// cleanupTimeout bounds the round trips padlock makes on a caller's behalf
// after the caller's own context may have ended: undoing an acquire whose
// outcome is unknown, and releasing the lock at the end of Do. When the
// caller's context has already ended, undoing an acquire gets only
// lateCleanupTimeout, so that Acquire returns close to its deadline; if
// Redis cannot answer that fast, the lock's ttl frees it.
const (
	cleanupTimeout     = 2 * time.Second
	lateCleanupTimeout = 100 * time.Millisecond
)

// A Client takes locks in one Redis deployment. It is safe for concurrent
// use. New starts no goroutine; the Client starts its background work as
// it is needed (renewals, the pub/sub connections of waiters, observer
// callbacks), and Close ends it.
type Client struct {
	rdb       redis.UniversalClient
	lastTTL   atomic.Pointer[boxedTTL]
	opts      options
	notify    notifier
	sched     scheduler
	nodes     []redis.UniversalClient // a Redlock's primaries (NewRedlock), or nil
	refused   error                   // what every call returns, for a client padlock cannot run on (a Ring), or nil
	calls     dispatcher              // runs the observer's funcs for the background work (see observe)
	nodeCalls tracker                 // calls to Redlock nodes not waited for (see onNodes)
	observers tracker                 // Observe's goroutines
	life      context.Context         // done once Close is called: ends every Observe
	end       context.CancelFunc      // ends life
	// wait sleeps for d, or until ctx ends (returning its error), when
	// notifications are off.
	wait func(ctx context.Context, key string, d time.Duration) error
}

// New returns a Client that takes locks through rdb: a *redis.Client, a
// *redis.ClusterClient or a failover client. The options set the Client's
// defaults; options passed to a single call override them.
//
// New does not contact Redis and starts no goroutine. A nil rdb is not a
// panic: every call on the returned Client fails with ErrInvalid. A
// *redis.Ring is refused the same way, with ErrUnsupported: a Ring routes
// a script by its first key and moves keys to another shard when one fails
// a health check, so a lock could be held on two shards at once. Use a
// Cluster, or NewRedlock over the shards.
func New(rdb redis.UniversalClient, opts ...Option) *Client {
	c := &Client{opts: defaultOptions().with(opts), wait: sleep}
	c.life, c.end = context.WithCancel(context.Background())
	c.sched.c = c
	c.notify.id = newToken()[:8]
	c.notify.quiet = pubsubQuiet
	if _, ok := rdb.(*redis.ClusterClient); ok {
		// On a Cluster a Client listens with plain pub/sub (see groupOn):
		// its id says so to the scripts that tell it of a grant.
		c.notify.id += plainID
		c.notify.sharded = -1
	}
	if !isNil(rdb) {
		c.rdb = rdb
	}
	if isRing(rdb) {
		c.refused = errRing
	}
	return c
}

// plainID ends the id of a Client that listens with plain pub/sub (see
// lua/grant.lua's tell); an id is otherwise hexadecimal.
const plainID = "p"

// errRing is what every call on a Client over a *redis.Ring returns.
var errRing = fmt.Errorf("%w: a *redis.Ring moves keys between shards (a shard that fails a health check hands its keys to another, and a script runs on its first key's shard), so a lock could be held twice; use a *redis.ClusterClient, or NewRedlock over the shards", ErrUnsupported)

func isRing(rdb redis.UniversalClient) bool {
	_, ok := rdb.(*redis.Ring)
	return ok
}

func isNil(rdb redis.UniversalClient) bool {
	if rdb == nil {
		return true
	}
	v := reflect.ValueOf(rdb)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// TryAcquire makes one attempt to take the lock key for ttl, in one round
// trip. It does not wait.
//
// On success it returns the Lock, which the caller must Release (or let
// expire). If another holder has the lock, it returns an error that matches
// ErrNotAcquired; so it does if the reply came back so late that less than
// a tenth of the ttl was left of the lock's validity (see Deadline): such a
// lock is released, never handed out. Bad input returns ErrInvalid without touching Redis; a
// Redis or context error is returned wrapped, never as ErrNotAcquired. A
// failed call never leaves the lock held: when the outcome of the attempt is
// unknown (a lost reply), TryAcquire deletes what it may have taken before
// returning (unless the token was chosen with WithToken: see there).
//
// ttl is rounded up to whole milliseconds, the resolution Redis keeps.
func (c *Client) TryAcquire(ctx context.Context, key string, ttl time.Duration, opts ...Option) (*Lock, error) {
	l, _, err := c.newLock(ctx, key, ttl, opts)
	if err != nil {
		return nil, err
	}
	if l.observer() != nil {
		return observeAcquire(ctx, l, false, c.tryAcquire)
	}
	return c.tryAcquire(ctx, l)
}

// tryAcquire is TryAcquire (and TryAcquireMany) once l is built.
func (c *Client) tryAcquire(ctx context.Context, l *Lock) (*Lock, error) {
	if err := ctx.Err(); err != nil {
		return nil, opError("acquire", l.lockName(), err)
	}
	if _, err := c.attempt(ctx, l); err != nil {
		if err == ErrNotAcquired {
			if m := l.multi(); m != nil {
				return nil, fmt.Errorf("%w: one of %q is held", ErrNotAcquired, m)
			}
			return nil, fmt.Errorf("%w: %q is held", ErrNotAcquired, l.key)
		}
		return nil, err
	}
	return l, nil
}

// lockName is how errors name l: its key, or its keys.
func (l *Lock) lockName() any {
	if m := l.multi(); m != nil {
		return m
	}
	return l.key
}

// Acquire takes the lock key for ttl, waiting while someone else holds it,
// until it succeeds or ctx is done. It blocks.
//
// It does not poll: it queues behind earlier waiters (of this Client, and
// of other Clients through Redis), and the release that ends the wait sets
// the lock for it in the same round trip (see the package documentation;
// the returned Lock's Deadline counts from before that release). Redis is
// the truth: a key freed by anything else (a DEL by hand, another
// library's release, eviction, a shortened or missing TTL) is noticed
// within a ticket renewal (2.5s for a ttl of 5s or more, ttl/2 below) by
// its Client, which serves the queue. It also looks when the holder's lock
// expires, and, with notifications off (WithoutNotifications) or on
// Redlock, after the backoff (WithBackoff). If ctx ends just as the
// lock is handed to it, it passes the lock on to the next waiter and
// returns the ctx error. The same token is used for every attempt (unless
// its ticket lapsed while it waited: it queues again under a new one), so
// an attempt whose reply was lost and is tried again finds its own lock
// and succeeds.
//
// On success it returns the Lock. When ctx ends while it waits for another
// holder, it returns an error that matches both ErrNotAcquired and
// ctx.Err(); when the Client is closed, one that matches ErrClosed. Bad input returns ErrInvalid; a Redis error (or ctx ending
// before any attempt found the lock held) ends the call at once and is
// returned wrapped, never as ErrNotAcquired: an outage is not contention. A
// failed call never leaves the lock held (unless the token was chosen with
// WithToken: see there).
func (c *Client) Acquire(ctx context.Context, key string, ttl time.Duration, opts ...Option) (*Lock, error) {
	l, o, err := c.newLock(ctx, key, ttl, opts)
	if err != nil {
		return nil, err
	}
	return c.acquireObserved(ctx, l, o)
}

// acquireObserved is acquireWaiting, between the observer's calls if l has
// an observer.
func (c *Client) acquireObserved(ctx context.Context, l *Lock, o options) (*Lock, error) {
	if l.observer() == nil {
		return c.acquireWaiting(ctx, l, o)
	}
	return observeAcquire(ctx, l, true, func(ctx context.Context, l *Lock) (*Lock, error) {
		return c.acquireWaiting(ctx, l, o)
	})
}

// notAcquired is Acquire's error when ctx ended first: it matches
// ErrNotAcquired, ctx.Err() and, if ctx has one, its cause.
func notAcquired(ctx context.Context, key string) error {
	return waitError(ctx, fmt.Errorf("%w: %q held by another holder when last looked at", ErrNotAcquired, key))
}

// waitError is err, which says why a wait ended without the lock, joined
// with ctx's error and cause.
func waitError(ctx context.Context, err error) error {
	err = fmt.Errorf("%w: %w", err, ctx.Err())
	if cause := context.Cause(ctx); cause != ctx.Err() {
		err = errors.Join(err, cause)
	}
	return err
}

// newLock checks the arguments of an acquire call and builds the Lock it
// would return, with a fresh token. It makes no round trip.
func (c *Client) newLock(ctx context.Context, key string, ttl time.Duration, opts []Option) (*Lock, options, error) {
	o := c.defaults()
	if len(opts) > 0 {
		o = o.with(opts)
	}
	ttl, err := c.check(ctx, key, ttl)
	if err != nil {
		return nil, o, err
	}
	if err := o.checkHold(key); err != nil {
		return nil, o, err
	}
	if err := o.checkReplicas(); err != nil {
		return nil, o, err
	}
	if err := c.checkRedlock(o); err != nil {
		return nil, o, err
	}
	l := &Lock{c: c, key: key, ttl: ttl}
	if o.replicas > 0 || o.obs != nil || o.maxHoldSet || o.minHoldSet {
		l.x = &lockExtra{replicas: o.replicas, replicaTimeout: o.replicaTimeout, obs: o.obs, maxHold: o.maxHold, minHold: o.minHold}
	}
	l.keys[0] = key
	if o.fencing && !queueable(key) {
		return nil, o, fmt.Errorf("%w: fencing needs a key with a hash tag or without braces, got %q", ErrInvalid, key)
	}
	if queueable(key) {
		if c.nodes == nil { // a Redlock's waiters queue only in their Client
			l.keys[1] = sideKey(key, "queue")
		}
		if o.fencing {
			l.keys[2] = sideKey(key, "fence")
		}
		if o.fencing || o.minHoldSet || o.tokenSet {
			l.keys[3] = sideKey(key, "mins") // a minimum it takes, or its token may hold with
		}
	}
	l.value = o.tokenPrefix + newToken()
	if o.tokenSet {
		if err := checkToken(o.token); err != nil {
			return nil, o, err
		}
		l.value = o.token
		if l.x == nil {
			l.x = &lockExtra{}
		}
		l.x.chosen = true
	}
	if o.metadata != "" {
		l.value += " " + o.metadata
	}
	if o.limitSet || o.shared {
		if err := c.newCounting(l, o); err != nil {
			return nil, o, err
		}
	}
	// The script arguments, boxed once for every call of this lock.
	l.args[0], l.args[1] = l.value, c.ttlArg(ttl)
	var key0 any = key
	tk := l.tryKeys()
	l.acqCmd = make([]any, 0, 3+len(tk)+3)
	l.acqCmd = append(l.acqCmd, "evalsha", acquireScript.digest(), numKeys[len(tk)], key0)
	for _, k := range tk[1:] {
		l.acqCmd = append(l.acqCmd, k)
	}
	l.acqCmd = append(l.acqCmd, l.args[0], l.args[1])
	if o.minHoldSet {
		l.acqCmd = append(l.acqCmd, o.minHold.Milliseconds())
	}
	return l, o, nil
}

// newToken returns a random UUIDv4 string: 122 random bits from
// crypto/rand.
func newToken() string {
	var u uuid.UUID
	_, _ = rand.Read(u[:])  // never fails, and always fills u
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	return u.String()
}

// ttlArg returns ttl in milliseconds as a script argument. Boxing an
// int64 allocates; locks of one Client mostly share one ttl, so the last
// box is kept for the next call.
func (c *Client) ttlArg(ttl time.Duration) any {
	ms := ttl.Milliseconds()
	if b := c.lastTTL.Load(); b != nil && b.ms == ms {
		return b.arg
	}
	b := &boxedTTL{ms: ms, arg: ms}
	c.lastTTL.Store(b)
	return b.arg
}

// boxedTTL is a ttl in milliseconds and the same number as a script
// argument.
type boxedTTL struct {
	ms  int64
	arg any
}

func (c *Client) defaults() options {
	if c == nil {
		return defaultOptions()
	}
	return c.opts
}

// check validates the arguments every call shares and returns ttl rounded
// up to whole milliseconds.
func (c *Client) check(ctx context.Context, key string, ttl time.Duration) (time.Duration, error) {
	switch {
	case c == nil || c.rdb == nil:
		return 0, fmt.Errorf("%w: nil redis client", ErrInvalid)
	case c.refused != nil:
		return 0, c.refused
	case ctx == nil:
		return 0, fmt.Errorf("%w: nil context", ErrInvalid)
	case key == "":
		return 0, fmt.Errorf("%w: empty key", ErrInvalid)
	}
	return roundTTL(ttl)
}

func roundTTL(ttl time.Duration) (time.Duration, error) {
	if ttl < time.Millisecond {
		return 0, fmt.Errorf("%w: ttl %v is under 1ms", ErrInvalid, ttl)
	}
	if r := ttl % time.Millisecond; r != 0 {
		ttl += time.Millisecond - r
	}
	return ttl, nil
}

// sideKey names a key that lives beside key: it begins with key, so that
// an ACL that admits key's prefix admits it too, and it shares key's Redis
// Cluster slot: "key:name" when key has a hash tag, and otherwise
// "key:{key}:name", whose hash tag is the whole key. The fencing counter
// is sideKey(key, "fence").
func sideKey(key, name string) string {
	if hasHashTag(key) {
		return key + ":" + name
	}
	return key + ":{" + key + "}:" + name
}

// queueable reports whether key can have side keys in its slot (see
// sideKey): a key without a hash tag but with a '{' or '}' cannot, since
// the braces of "key:{key}:name" would not enclose the whole key. Such a
// key cannot be fenced, and its waiters are not queued across clients.
func queueable(key string) bool {
	return hasHashTag(key) || !strings.ContainsAny(key, "{}")
}

// hasHashTag reports whether Redis Cluster hashes only part of key: the
// part between the first '{' and the first '}' after it, if not empty.
func hasHashTag(key string) bool {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return false
	}
	return strings.IndexByte(key[open+1:], '}') > 0
}

// attempt runs the acquire script once for l. On success it records the
// fence and the send time in l and returns nil. When someone else holds the
// lock it returns ErrNotAcquired and the holder's remaining ttl (negative
// if unknown). Any other error is wrapped; if the script may have run, the
// lock is released again before attempt returns.
func (c *Client) attempt(ctx context.Context, l *Lock) (time.Duration, error) {
	if l.counted() != nil {
		return c.tryQueued(ctx, l)
	}
	if c.nodes != nil {
		return c.redlockAttempt(ctx, l)
	}
	var sent time.Time
	var n int64
	conn, err := l.onWriter(ctx, func(r doer) (err error) {
		sent = time.Now()
		n, err = l.acquireOn(ctx, r)
		return err
	})
	if conn != nil {
		defer conn.Close()
	}
	if err != nil {
		if mayHaveRun(err) {
			l.undo(ctx)
		}
		return 0, opError("acquire", l.key, err)
	}
	if n < 0 {
		return time.Duration(-2-n) * time.Millisecond, ErrNotAcquired
	}
	if conn != nil {
		if err := l.replicated(ctx, conn); err != nil {
			l.cleanup(ctx)
			return 0, err
		}
	}
	return 0, l.acquired(ctx, sent, n)
}

// minValidity is the share of its ttl that a lock must have left, by its
// local deadline, when the acquire's reply arrives; a lock that comes back
// with less (the round trip took most of the ttl) is released, not handed
// out.
const minValidity = 10 // percent

// acquired records a successful acquire sent at sent with fence fence. If
// the reply came so late that the lock's validity is (nearly) gone, it
// releases the lock and returns an error matching ErrNotAcquired.
func (l *Lock) acquired(ctx context.Context, sent time.Time, fence int64) error {
	l.mu.Lock()
	l.fence, l.sent = fence, sent
	l.took(sent)
	left := time.Until(l.deadline())
	if left >= l.ttl*minValidity/100 && l.c.nodes == nil {
		// Done with: let a long-held lock be smaller. (A waiter whose
		// lock came too late attempts again with it; a Redlock node that
		// has not answered yet may still be sending it.)
		l.acqCmd = nil
	}
	l.mu.Unlock()
	if left < l.ttl*minValidity/100 {
		what := "left to its token" // see undo
		if l.undo(ctx) {
			what = "released"
		}
		return fmt.Errorf("%w: %q: taken with only %v of its %v ttl left (the round trip took %v); %s",
			ErrNotAcquired, l.key, max(left, 0), l.ttl, time.Since(sent).Round(time.Millisecond), what)
	}
	return nil
}

// mayHaveRun reports whether a call that failed with err may still have
// run in Redis: not if Redis answered with an error (padlock's scripts and
// SET fail before their first write, if at all), nor if no connection could
// be made; otherwise (a timeout, a lost reply, a cancelled context) it may.
func mayHaveRun(err error) bool {
	if isRedisError(err) {
		return false
	}
	var nerr *net.OpError
	return !errors.As(err, &nerr) || nerr.Op != "dial"
}

// isRedisError reports whether err is an error reply from Redis.
func isRedisError(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}

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
	capAt          time.Time     // with maxHold: when that is (from the first success); under mu
	minHold        time.Duration // WithMinHold: Redis keeps it at least this long after it was taken
	minUntil       time.Time     // with minHold: until when, less a drift (from the first success); under mu
}

// took records that l was taken by a call sent at sent: its WithMaxHold
// and WithMinHold count from the first. l.mu must be held, or l not yet
// shared.
func (l *Lock) took(sent time.Time) {
	if l.x == nil {
		return
	}
	if l.x.maxHold > 0 && l.x.capAt.IsZero() {
		l.x.capAt = sent.Add(l.x.maxHold)
	}
	if l.x.minHold > 0 && l.x.minUntil.IsZero() {
		l.x.minUntil = sent.Add(l.x.minHold - drift(l.x.minHold))
	}
}

// pastMaxHold returns the error of Extend on a lock held for its
// WithMaxHold, or nil.
func (l *Lock) pastMaxHold() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.x == nil || l.x.capAt.IsZero() || time.Now().Before(l.x.capAt) {
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
// minus a margin for clock drift (1% of the ttl plus 2ms). It is measured
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
func (l *Lock) deadline() time.Time {
	d := l.sent.Add(l.ttl - drift(l.ttl))
	if l.x != nil && l.x.minUntil.After(d) {
		return l.x.minUntil // Redis keeps it for its minimum
	}
	return d
}

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
// context is safe. The round trip then runs on a context of its own,
// bounded by two seconds or the time left to the lock's local deadline
// (see Deadline), whichever is shorter. After the local deadline the lock has
// expired in Redis, so Release returns at once, an error matching
// ErrNotHeld, and sends nothing.
//
// It returns nil if the lock was ours and is now deleted (and handed to
// the first waiter, if clients wait), and an error that matches ErrNotHeld
// if it was not ours any more (expired, deleted or taken by someone else;
// another holder's lock is never touched), including on a second Release.
// If the reply to a successful release is lost and go-redis sends the
// release again, the retry finds the lock gone and Release reports
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
	rctx := ctx
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		rctx, cancel = detach(ctx, left)
		defer cancel()
	}
	n, err := l.release(rctx, false, false)
	if err != nil && rctx == ctx && ctx.Err() != nil {
		// ctx ended during the call: send it again, detached from ctx.
		// (If the first one ran, this one finds the lock gone: ErrNotHeld.)
		dctx, cancel := detach(ctx, time.Until(deadline))
		defer cancel()
		n, err = l.release(dctx, false, false)
	}
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

// detach returns a context with ctx's values but not its cancellation,
// that ends after left or releaseTimeout, whichever is shorter.
func detach(ctx context.Context, left time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), min(left, releaseTimeout))
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
	if retrying {
		l.c.sched.dropRelease(l)
	}
	l.holdEnded(false, nil, bg)
}

// retryable reports whether a release that failed with err is worth
// sending again: Redis could not be reached or answer (a network error, a
// timeout), or answered that it cannot serve now (loading its data after a
// restart, a cluster or failover in progress). An error reply of any other
// kind (a refused permission, say) would fail again, as would anything sent
// through a go-redis client that was closed.
func retryable(err error) bool {
	if errors.Is(err, redis.ErrClosed) {
		return false // the go-redis client was closed: no retry can land
	}
	if !isRedisError(err) {
		return true
	}
	for _, prefix := range [...]string{"LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY"} {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	return false
}

// cleanup releases l after an acquire attempt whose outcome is unknown, on
// a context of its own so that it runs even when ctx has ended. Its error
// is dropped: if Redis cannot be reached now, the ttl frees the lock.
func (l *Lock) cleanup(ctx context.Context) {
	budget := cleanupTimeout
	if ctx.Err() != nil {
		budget = lateCleanupTimeout
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), budget)
	defer cancel()
	_, _ = l.release(ctx, false, true) // an undo: minimum or not
}

// undo is cleanup after an acquire whose outcome is unknown or came too
// late, unless l's token is chosen: the token may have held the key before
// the call, which then only renewed it, or may hold it in another process,
// so what the call may have taken is left to the token's holders. It
// reports whether it released.
func (l *Lock) undo(ctx context.Context) bool {
	if l.chosenToken() {
		return false
	}
	l.cleanup(ctx)
	return true
}

// release runs the release script, and reports 1 if every key was still
// ours and is deleted, 0 if not (a multi-key lock with some keys no longer
// ours has the others deleted, and reports 0).
func (l *Lock) release(ctx context.Context, bg, undo bool) (int64, error) {
	if l.c.nodes != nil {
		return l.redlockRelease(ctx, undo)
	}
	return l.releaseOn(ctx, l.c.rdb, bg, undo)
}

// Extend sets the lock to expire ttl from now, if it is still ours, in one
// round trip. It blocks until Redis answers or ctx is done. A later
// KeepAlive renews with this ttl.
//
// It returns an error that matches ErrNotHeld, and changes nothing, if the
// lock is not ours any more: it never brings back an expired lock. Any
// KeepAlive of the lock then ends with ErrLost. ttl under 1ms returns
// ErrInvalid; other ttls are rounded up to whole milliseconds. A Redis error
// is returned wrapped.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if err := l.usable(ctx); err != nil {
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
		l.cleanup(ctx)
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
		n, err = script.Run(ctx, r, keys, args...).Int64()
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
		n, err = script.Run(ctx, l.c.rdb, keys, args...).Int64()
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
