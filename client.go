package padlock

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/padlock-go/padlock/driver"
)

// cleanupTimeout bounds the round trips padlock makes on a caller's behalf
// after the caller's own context may have ended: undoing an acquire whose
// outcome is unknown, and releasing the lock at the end of Do. When the
// caller's context has already ended, undoing an acquire (or leaving a
// queue) waits only lateCleanupTimeout, so that Acquire returns close to
// its deadline; a round trip Redis has not answered by then goes on in the
// background (see inflight.go).
const (
	cleanupTimeout     = 2 * time.Second
	lateCleanupTimeout = 50 * time.Millisecond
)

// A Client takes locks in one Redis deployment. It is safe for concurrent
// use. New starts no goroutine; the Client starts its background work as
// it is needed (renewals, the pub/sub connections of waiters, observer
// callbacks), and Close ends it.
type Client struct {
	d         driver.Driver // the Redis the Client talks to (a Redlock's first node), or nil if refused
	pipe      *pipeline     // what a lock's scripts go through: d, pipelined (see pipeline.go)
	kind      driver.Kind   // d's Kind
	lastTTL   atomic.Pointer[boxedTTL]
	holds     holdList // the Locks it holds, for Local
	opts      options
	notify    notifier
	watch     watcher // wakes waiters when others free their keys (see watch.go)
	sched     scheduler
	nodes     []driver.Driver // a Redlock's primaries (NewDriverRedlock), or nil
	kinds     []driver.Kind   // the Kind of each of pubsubNodes
	refused   error           // what every call returns, for a client padlock cannot run on (nil, a Ring), or nil
	borrowed  bool            // the drivers are another Client's (see sibling): Close leaves what they own
	calls     dispatcher      // runs the observer's funcs for the background work (see observe)
	nodeCalls tracker         // calls to Redlock nodes not waited for (see onNodes)
	late      tracker         // follow-ups of calls left in flight (see Client.after)
	observers tracker         // Observe's goroutines
	life      context.Context // done once Close is called: ends every Observe
	end       context.CancelFunc
	closing   sync.Once   // runs close once; other Close calls wait for it
	shut      atomic.Bool // Close was called: nothing more is taken, waited for, extended or kept alive
}

// NewDriver returns a Client that takes locks through d: a Redis client
// that an adapter module (padlockrueidis, padlockvalkey) or a package of
// one's own wraps (see package driver). It is New for any client: the
// options set the Client's defaults, options passed to a single call
// override them, and the Client keeps New's promises on the kind of
// deployment d reports.
//
// NewDriver calls d.Kind once; it does not contact Redis and starts no
// goroutine. A nil d is not a panic: every call on the returned Client
// fails with ErrInvalid, as it does when d reports a Kind that package
// driver does not define. The Client never closes d: close it after the
// Client's Close.
func NewDriver(d driver.Driver, opts ...Option) *Client {
	if isNil(d) {
		return refusing(errNilDriver, opts)
	}
	return newClient(d, nil, opts)
}

// NewDriverRedlock returns a Client whose locks live on the independent
// primaries ds at once, each a Driver: NewRedlock's Client (see it for
// what a Redlock does and refuses), for any client. A nil or empty ds, or
// a nil Driver in it, makes every call fail with ErrInvalid. It calls each
// Driver's Kind once; it does not contact Redis and starts no goroutine.
// The Client never closes the Drivers.
func NewDriverRedlock(ds []driver.Driver, opts ...Option) *Client {
	if err := nilIn("NewDriverRedlock", "driver.Driver", ds); err != nil {
		return refusing(err, opts)
	}
	return newClient(ds[0], slices.Clone(ds), opts)
}

// Why a Client cannot be used: a nil *Client (a method called on one), or
// a Client that was given nothing to talk to.
var (
	errNilClient = fmt.Errorf("%w: a nil *padlock.Client (make one with padlock.New, NewRedlock, NewDriver or NewDriverRedlock)", ErrInvalid)
	errNilRedis  = fmt.Errorf("%w: padlock.New was given a nil go-redis client", ErrInvalid)
	errNilDriver = fmt.Errorf("%w: padlock.NewDriver was given a nil driver.Driver", ErrInvalid)
)

// nilIn returns ErrInvalid, for the constructor fn, if clients is empty or
// holds a nil one (what: what fn takes), or nil.
func nilIn[T any](fn, what string, clients []T) error {
	if len(clients) == 0 {
		return fmt.Errorf("%w: padlock.%s was given no %ss", ErrInvalid, fn, what)
	}
	for i, c := range clients {
		if isNil(c) {
			return fmt.Errorf("%w: padlock.%s was given a nil %s (at index %d)", ErrInvalid, fn, what, i)
		}
	}
	return nil
}

// newClient returns a Client of d, or of a Redlock's nodes (d the first).
func newClient(d driver.Driver, nodes []driver.Driver, opts []Option) *Client {
	c := refusing(nil, opts)
	all := nodes
	if all == nil {
		all = []driver.Driver{d}
	}
	var kinds []driver.Kind
	for _, n := range all {
		k := n.Kind()
		if k != driver.Single && k != driver.Cluster && k != driver.Sentinel {
			c.refused = fmt.Errorf("%w: the driver reports Kind %d, which package driver does not define", ErrInvalid, k)
		}
		kinds = append(kinds, k)
	}
	c.use(d, nodes, kinds)
	return c
}

// use makes c talk to d, or to a Redlock's nodes (d the first), of kinds
// (those of pubsubNodes).
func (c *Client) use(d driver.Driver, nodes []driver.Driver, kinds []driver.Kind) {
	c.d, c.kinds, c.kind = bound(d), kinds, kinds[0]
	for _, n := range nodes {
		c.nodes = append(c.nodes, bound(n))
	}
	c.pipe = newPipeline(c.d.(bounded).Driver)
	if c.kind == driver.Cluster {
		// On a Cluster a Client listens with plain pub/sub (see groupOn):
		// its tickets say so to the scripts that tell it of a grant.
		c.notify.sharded = -1
	}
}

// refusing returns a Client with no driver, whose every call returns
// refused (if not nil).
func refusing(refused error, opts []Option) *Client {
	c := &Client{opts: defaultOptions().with(opts), refused: refused}
	c.life, c.end = context.WithCancel(context.Background())
	c.sched.c = c
	c.sched.life, c.sched.end = context.WithCancel(context.Background())
	c.notify.id = newToken()[:8]
	c.notify.quiet = pubsubQuiet
	return c
}

// boxTTL returns ttl in milliseconds boxed as a script argument, and as a
// hold's span. Boxing an int64 allocates; locks of one Client mostly
// share one ttl, so the last box is kept for the next call.
func (c *Client) boxTTL(ttl time.Duration) *boxedTTL {
	ms := ttl.Milliseconds()
	if b := c.lastTTL.Load(); b != nil && b.ms == ms {
		return b
	}
	b := &boxedTTL{ms: ms, arg: ms, span: " ~" + strconv.FormatInt(ms, 10)}
	c.lastTTL.Store(b)
	return b
}

// boxedTTL is a ttl in milliseconds, the same number as a script
// argument, and as a new hold's span in its value (see parseValue).
type boxedTTL struct {
	ms   int64
	arg  any
	span string
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
	case c == nil:
		return 0, errNilClient
	case c.refused != nil:
		return 0, c.refused
	case ctx == nil:
		return 0, fmt.Errorf("%w: nil context", ErrInvalid)
	case key == "":
		return 0, fmt.Errorf("%w: empty key", ErrInvalid)
	}
	return roundTTL(ttl)
}

// open returns ErrClosed, naming the call op on key, if c is closed, or
// nil: a call that would take, wait for, extend or keep alive a lock makes
// no round trip then.
func (c *Client) open(op string, key any) error {
	if c.shut.Load() {
		return fmt.Errorf("%w: %s %q after Close", ErrClosed, op, key)
	}
	return nil
}

// maxTTL is the longest ttl (and WithMinHold) padlock accepts: the
// largest whole number of milliseconds a time.Duration holds, about 292
// years. Redis itself accepts any PX and PEXPIRE above 0 whose expiry,
// counted from its clock in milliseconds, fits in an int64, far beyond
// it; a longer Duration would overflow when rounded up to milliseconds.
const maxTTL = time.Duration(math.MaxInt64/int64(time.Millisecond)) * time.Millisecond

func roundTTL(ttl time.Duration) (time.Duration, error) {
	return millis("ttl", ttl)
}

// millis returns d, a duration that goes to Redis as what, rounded up to
// whole milliseconds, the resolution Redis keeps; or ErrInvalid if d is
// under 1ms or over maxTTL.
func millis(what string, d time.Duration) (time.Duration, error) {
	switch {
	case d < time.Millisecond:
		return 0, fmt.Errorf("%w: %s %v is under 1ms", ErrInvalid, what, d)
	case d > maxTTL:
		return 0, fmt.Errorf("%w: %s %v is over %v (%dms), the longest padlock passes to Redis", ErrInvalid, what, d, maxTTL, maxTTL.Milliseconds())
	}
	if r := d % time.Millisecond; r != 0 {
		d += time.Millisecond - r
	}
	return d, nil
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

// closeOwned closes what the Client's drivers made for it alone (see
// ownedCloser), unless they are another Client's.
func (c *Client) closeOwned() {
	if c.borrowed {
		return
	}
	for _, d := range c.pubsubNodes() {
		if b, ok := d.(bounded); ok {
			d = b.Driver
		}
		if o, ok := d.(ownedCloser); ok {
			o.closeOwned()
		}
	}
}

// Close ends the Client's waits and background work, and waits for its
// goroutines to exit. Every Acquire or Do waiting on it returns ErrClosed:
// Close wakes them, waits for each to end (an attempt in flight first gets
// its reply, within 2s: see below), and takes their tickets out of Redis,
// one pipelined round trip per node, passing on at once what a release
// granted them meanwhile. So the go-redis client (or the Driver) may be closed as soon as
// Close returns (see ExampleClient_Close), and the next release serves
// another Client's waiter. A waiter inside its observer's WaitStart is not
// waited for: Close takes its ticket out, and it returns ErrClosed once
// back (so WaitStart may call Close; see Observer).
//
// Close gives its waiters and their departures 2s in all. A waiter whose
// round trip Redis has not answered by then is not waited for: it returns
// once Redis answers or its context ends, with the lock if its attempt got
// it, else with the error or ErrClosed, leaving the queue by itself;
// departures not answered by then are abandoned. Their tickets lapse
// within 5s, and a lock granted to such a waiter, or taken by an attempt
// undone too late, expires by its ttl. Round trips of the background work
// in flight (a renewal, a release retry) are not waited for either, nor,
// past those 2s, a goroutine of the Client's that waits for Redis: the undo
// of an acquire left in flight (see Acquire), a Redlock node's call that
// waits for its turn behind one, a pub/sub connection dialing again. So
// Close returns within about 2s whatever Redis does; what it left in
// flight goes on until the Redis client gives up on it (go-redis: its
// ReadTimeout) or is closed.
//
// Every KeepAlive of its locks ends with cause ErrClosed (the locks stay
// held until released or expired), every Observe of it closes its channel,
// and releases being retried in the background (see Lock.Release) are
// abandoned: those locks expire by their ttl. Close releases no lock and
// does not close the go-redis client or the Driver; it closes the clients it made of
// Cluster nodes that no slot map listed (see WithReplicas).
//
// From the moment Close is called, every call that would take, wait for,
// extend or keep alive a lock returns an error matching ErrClosed before
// any round trip, and takes nothing: TryAcquire, Acquire, TryDo and Do
// (fn is not run), TryAcquireMany, AcquireMany, Campaign, Lead, Resume,
// Check (its cycle takes a lock), Extend and KeepAlive (its context is
// already cancelled, with cause ErrClosed) of the Client's locks, and
// Proclaim of its leaderships (ErrNotHeld too: Close ended them). What
// frees or only reads still works, one round trip each: Release of a lock
// taken before Close, Resign, Break, TTL, Inspect and Leader; Observe
// returns a closed channel. Close is idempotent: a Close called while
// another runs returns when that one does. It always returns nil; so does
// Close of a nil *Client.
func (c *Client) Close() error {
	if c != nil {
		c.closing.Do(c.close)
	}
	return nil
}

// close is Close's work, done once.
func (c *Client) close() {
	c.shut.Store(true)
	until := time.Now().Add(cleanupTimeout)
	c.depart(c.notify.closeWaiters(until), until)
	c.notify.closeSubscribers(until)
	c.watch.close(until)
	c.sched.close()
	c.calls.wait()
	// Those below may wait for a round trip Redis does not answer: not
	// past until.
	c.nodeCalls.close(until) // a Redlock node's call waits for its turn behind one left in flight
	c.late.close(until)
	c.closeOwned()
	c.end()
	c.observers.close(until)
}
