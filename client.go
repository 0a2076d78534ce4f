package padlock

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	unlisted  unlistedNodes           // clients of Cluster nodes a redirect named and no slot map lists (see onWriter)
	observers tracker                 // Observe's goroutines
	life      context.Context         // done once Close is called: ends every Observe
	end       context.CancelFunc      // ends life
	closing   sync.Once               // runs close once; other Close calls wait for it
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
	c := &Client{opts: defaultOptions().with(opts)}
	c.life, c.end = context.WithCancel(context.Background())
	c.sched.c = c
	c.notify.id = newToken()[:8]
	c.notify.quiet = pubsubQuiet
	if _, ok := rdb.(*redis.ClusterClient); ok {
		// On a Cluster a Client listens with plain pub/sub (see groupOn):
		// its tickets say so to the scripts that tell it of a grant.
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

// Close ends the Client's waits and background work, and waits for its
// goroutines to exit. Every Acquire or Do waiting on it returns ErrClosed:
// Close wakes them, waits for each to end (an attempt in flight first gets
// its reply, within 2s: see below), and takes their tickets out of Redis,
// one pipelined round trip per node, passing on at once what a release
// granted them meanwhile. So the go-redis client may be closed as soon as
// Close returns (see ExampleClient_Close), and the next release serves
// another Client's waiter. A waiter inside its observer's WaitStart is not
// waited for: Close takes its ticket out, and it returns ErrClosed once
// back (so WaitStart may call Close; see Observer).
//
// Close gives its waiters and their departures 2s in all. A waiter whose
// round trip Redis has not answered by then is not waited for: it returns
// once Redis answers or go-redis gives up, with the lock if its attempt
// got it, else with the error or ErrClosed, leaving the queue by itself;
// departures not answered by then are abandoned. Their tickets lapse
// within 5s, and a lock granted to such a waiter, or taken by an attempt
// undone too late, expires by its ttl. So when Redis does not answer,
// Close returns after about 2s, plus the time go-redis takes to give up on
// a round trip already in flight in the background (a renewal, a release
// retry, a Redlock node's call; on a Cluster client, the departures too):
// go-redis bounds a read by its ReadTimeout, not by a context's deadline
// (unless ContextTimeoutEnabled), and tries again after a timeout, up to
// MaxRetries times, while the round trip's context lasts (for a lock's
// renewal, until its local deadline). With no read timeout (ReadTimeout
// -1), such a round trip holds Close until Redis answers or the connection
// drops.
//
// Every KeepAlive of its locks ends with cause ErrClosed (the locks stay
// held until released or expired), every Observe of it closes its channel,
// and releases being retried in the background (see Lock.Release) are
// abandoned: those locks expire by their ttl. Close releases no lock and
// does not close the go-redis client; it closes the clients it made of
// Cluster nodes that no slot map listed (see WithReplicas). Later calls
// that wait or keep alive return ErrClosed; Release still works. Close is
// idempotent: a Close called while another runs returns when that one
// does. It always returns nil.
func (c *Client) Close() error {
	if c != nil {
		c.closing.Do(c.close)
	}
	return nil
}

// close is Close's work, done once.
func (c *Client) close() {
	until := time.Now().Add(cleanupTimeout)
	c.depart(c.notify.closeWaiters(until), until)
	c.notify.closeSubscribers()
	c.sched.close()
	c.calls.wait()
	c.nodeCalls.close()
	c.unlisted.close()
	c.end()
	c.observers.close()
}
