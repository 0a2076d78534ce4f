package padlock

import (
	"fmt"
	"strings"
	"time"
)

// An Option configures a Client (passed to New, it sets the default for
// every call) or a single call (passed to TryAcquire, Acquire, TryDo or Do,
// it overrides the Client's default for that call).
type Option interface {
	apply(*options)
}

// options holds every setting an Option can change. Its zero value is not
// the default: see defaultOptions.
type options struct {
	fencing        bool
	metadata       string
	backoff        Backoff
	notify         bool
	replicas       int
	replicaTimeout time.Duration
	obs            *Observer     // WithObserver, WithLogger: nil for none
	limit          int           // WithLimit
	limitSet       bool          // WithLimit was given
	shared         bool          // WithShared
	token          string        // WithToken
	tokenSet       bool          // WithToken was given: else the token is random
	tokenPrefix    string        // begins a random token (a leadership's: see Campaign)
	maxHold        time.Duration // WithMaxHold
	maxHoldSet     bool          // WithMaxHold was given
	minHold        time.Duration // WithMinHold
	minHoldSet     bool          // WithMinHold was given
}

func defaultOptions() options {
	return options{backoff: defaultBackoff, notify: true}
}

// with returns a copy of o with opts applied; o itself is unchanged.
func (o options) with(opts []Option) options {
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&o)
		}
	}
	return o
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithFencing makes the acquire script also increment the key's fencing
// counter, so that Lock.Fence reports a number that is strictly greater than
// every fence handed out before for the same key. The counter lives at
// "key:{key}:fence" (or "key:fence" when key already has a hash tag): it
// begins with the key, so an ACL that admits the key admits it, and it
// shares the key's Redis Cluster slot. It never expires.
//
// A key that contains '{' or '}' but no hash tag cannot have such a side
// key; acquiring it with fencing fails with ErrInvalid.
func WithFencing() Option {
	return optionFunc(func(o *options) { o.fencing = true })
}

// WithToken makes an acquire use token, which the caller chooses (a job
// id, a deployment id), instead of a random one, so that another process
// that knows it can pick the lock up (see Client.Resume), and a process
// that restarts can take its own lock again: when token already holds the
// key, TryAcquire, Acquire and TryAcquireMany succeed at once, set the ttl
// anew and store the metadata of this call; a fenced lock keeps its fence.
// The earlier Lock still holds it too: Release, Extend and TTL compare the
// token, not the metadata stored beside it.
//
// A token holds a key as one kind: taken again as another (WithShared,
// WithLimit, or neither, where it holds the key otherwise), it is another
// holder, and waits for the first. A lock taken again with WithFencing
// keeps the fence it holds with (Redis records it), or, if it was taken
// without one, gets a new fence, above every earlier holder's.
//
// A chosen token must be unique to its holder: two processes that acquire
// with the same token share one lock, each believing it holds it alone.
// Tokens are compared exactly. A token must be 1 to 1024 bytes long, must
// not contain a space, tab, newline or other ASCII white space (the value
// in Redis is the token, a space and the metadata), and must not be
// "padlock:shared" (the marker of a shared hold); any other token is
// ErrInvalid. One Acquire at a time may wait with a given token in a
// Client: a second one that would wait beside it is ErrInvalid.
//
// Because the token may already hold the key, an acquire with it that
// fails without knowing whether Redis ran it (a lost reply, a context that
// ends during the round trip, a reply that came too late), or that gives
// up waiting before any reply showed it queued, does not release what it
// may have taken, as an acquire with a random token does: release it by
// the token (Client.Resume, then Release) if it must go; else it expires
// with its ttl. (A Redlock's single-key acquire that fails because a
// majority of its nodes are held by another token releases what it took,
// also on the nodes that had not answered, once they do: the token holds
// no quorum there to keep.) A grant handed to a waiting chosen token is
// confirmed with one more round trip, since it may have been meant for an
// earlier wait with the token.
func WithToken(token string) Option {
	return optionFunc(func(o *options) { o.token, o.tokenSet = token, true })
}

// maxTokenLen is the longest token WithToken accepts, in bytes.
const maxTokenLen = 1024

// checkToken reports why a token chosen with WithToken cannot be used, or
// nil.
func checkToken(token string) error {
	switch {
	case token == "":
		return fmt.Errorf("%w: empty token", ErrInvalid)
	case len(token) > maxTokenLen:
		return fmt.Errorf("%w: token of %d bytes, over the %d-byte limit", ErrInvalid, len(token), maxTokenLen)
	case strings.ContainsAny(token, " \t\n\v\f\r"):
		return fmt.Errorf("%w: token %q contains white space", ErrInvalid, token)
	case token == sharedMarker:
		return fmt.Errorf("%w: token %q is reserved", ErrInvalid, token)
	}
	return nil
}

// WithMaxHold caps how long the lock is kept: KeepAlive (and so Do, TryDo
// and Lead) renews it only until d has passed since it was taken, and then
// stops, so that a holder that is stuck, or runs far longer than planned,
// lets the others in. d counts from when this Lock got the lock, as seen
// in its process: when the acquire that took it was sent, or, for a lock
// a release handed to a waiting Acquire, when the grant arrived. The lock
// then expires at its ttl (or at the end of its minimum, WithMinHold) like
// any lease that is no longer renewed, and the KeepAlive context ends, at
// its local deadline (see Lock.Deadline), with a cause matching both
// ErrMaxHold and ErrLost. Extend once d has passed returns ErrMaxHold and
// changes nothing. It applies to a lock, a semaphore place and a shared
// hold, and on a Redlock Client. A d of zero or less is ErrInvalid.
//
// The cap belongs to the Lock, in its process; Redis does not keep it. A
// Lock that Client.Resume returns has no cap, whatever the original had,
// unless WithMaxHold is given to Resume: d then counts from Resume's
// round trip.
func WithMaxHold(d time.Duration) Option {
	return optionFunc(func(o *options) { o.maxHold, o.maxHoldSet = d, true })
}

// WithMinHold keeps the lock for at least d after it was taken, however
// soon it is released: with it, Do and TryDo run a job at most once per d,
// on every instance together (TryDo on each instance's hourly tick with
// WithMinHold(23*time.Hour) runs the job once a day). Release before d has
// passed returns nil and leaves the key held by the same token (and fence)
// until then, when the first waiter is served; after d it frees the key at
// once. The minimum is kept in Redis with the hold, so a release by another
// process (Resume, padlock release) keeps it too, and a holder that dies
// frees the key at the later of its ttl and the minimum. No Extend or
// renewal shortens it; Break ends it. The Lock's Deadline counts it, and
// so does KeepAlive: an outage that ends before the minimum does not end
// the KeepAlive context. It applies to a lock, a semaphore place and a
// shared hold, and on a Redlock Client (on every node).
//
// d is rounded up to whole milliseconds, as a ttl is. A d of zero or less,
// or over the longest ttl (see TryAcquire), a d longer than WithMaxHold's,
// a multi-key lock and a key that cannot have side keys (one with braces
// but no hash tag) are ErrInvalid. An acquire that fails (a Redlock attempt short of a quorum,
// a lock that came too late) frees what it took at once, minimum or not.
func WithMinHold(d time.Duration) Option {
	return optionFunc(func(o *options) { o.minHold, o.minHoldSet = d, true })
}

// checkHold validates WithMinHold and WithMaxHold for a lock of key, and
// returns o with the minimum rounded up to whole milliseconds.
func (o options) checkHold(key string) (options, error) {
	switch {
	case o.maxHoldSet && o.maxHold <= 0:
		return o, fmt.Errorf("%w: WithMaxHold(%v): the maximum must be positive", ErrInvalid, o.maxHold)
	case !o.minHoldSet:
		return o, nil
	case o.minHold <= 0:
		return o, fmt.Errorf("%w: WithMinHold(%v): the minimum must be positive", ErrInvalid, o.minHold)
	case o.maxHoldSet && o.minHold > o.maxHold:
		return o, fmt.Errorf("%w: WithMinHold(%v) is longer than WithMaxHold(%v)", ErrInvalid, o.minHold, o.maxHold)
	case !queueable(key):
		return o, fmt.Errorf("%w: WithMinHold needs a key with a hash tag or without braces, got %q", ErrInvalid, key)
	}
	m, err := millis("WithMinHold", max(o.minHold, time.Millisecond))
	o.minHold = m
	return o, err
}

// WithoutFencing turns fencing off for one call on a Client created with
// WithFencing.
func WithoutFencing() Option {
	return optionFunc(func(o *options) { o.fencing = false })
}

// WithMetadata stores s with the lock, after its token: the value of the
// lock's key in Redis is the token, a space, the hold's span (" ~" and ms,
// see LockInfo.HeldFor), a space and s, so an operator can see who holds a
// lock with GET. Lock.Metadata reads it back. An empty s stores
// no metadata.
func WithMetadata(s string) Option {
	return optionFunc(func(o *options) { o.metadata = s })
}

// WithBackoff sets how long Acquire and Do sleep between attempts when they
// have no better signal. A nil b restores the default,
// ExponentialBackoff(8*time.Millisecond, 512*time.Millisecond).
func WithBackoff(b Backoff) Option {
	return optionFunc(func(o *options) {
		if b == nil {
			b = defaultBackoff
		}
		o.backoff = b
	})
}

// WithoutNotifications makes Acquire and Do wait by polling alone (the
// holder's remaining ttl, then the backoff), without subscribing to
// notifications: for proxies that do not pass pub/sub through. Grants are
// still announced, for other clients. The waiter still queues in Redis and
// a release hands it the lock in its turn: it learns so at its next poll,
// at its ticket's next renewal (which finds the ticket gone), or at once
// when the release is made through the same Client (from the release's
// reply).
func WithoutNotifications() Option {
	return optionFunc(func(o *options) { o.notify = false })
}
