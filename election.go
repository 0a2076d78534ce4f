package padlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/padlock-go/padlock/driver"
)

// Leader election, on a lock: the leader of a key is the holder of the
// lock at that key, taken with fencing (its fence is the term) and with the
// published value as its metadata, and kept alive. Every change of leader
// or value is announced on the channel leaderChannel(key), which observers
// listen to; an observer also reads the state again when the leader's
// lease would end, and when its subscription comes back.

// ErrNoLeader is returned by Leader when nobody leads the key.
var ErrNoLeader = errors.New("padlock: no leader")

// LeaderInfo is who leads a key at one moment.
type LeaderInfo struct {
	Value string        // what the leader published; "" with no leader
	Term  int64         // the leader's term, 0 with no leader
	TTL   time.Duration // time left on the leader's lease
}

// A Leadership is a Client's term as the leader of a key, from Campaign.
// Its methods are safe for concurrent use.
type Leadership struct {
	lock   *Lock
	ctx    context.Context
	cancel context.CancelCauseFunc
	stop   context.CancelFunc // the lock's KeepAlive

	mu    sync.Mutex
	value string
}

// leaderToken begins the token of every leadership: Leader tells a leader
// from another holder of the key by it.
const leaderToken = "leader/"

// leaderChannel is where changes of key's leader are announced: a side
// key's name, so that it shares key's ACL prefix.
func leaderChannel(key string) string { return sideKey(key, "leader") }

// leaderChanged is the message of a change (its content does not matter:
// observers read the state again).
const leaderChanged = "changed"

// Campaign waits, in line with the other candidates for key (first come,
// first served), until the caller leads key, and returns its Leadership;
// it blocks. The leadership is a lock at key, taken with fencing and with
// value as its metadata (so Inspect and `padlock inspect` show it), kept
// alive in the background for ttl at a time until Resign, the Client's
// Close, or its loss; its Term is the lock's fence, strictly greater than
// every earlier leader's of key. value is what Leader and Observe report
// (an address, a host name).
//
// When ctx ends first it returns an error matching ErrNotAcquired and
// ctx's error, as Acquire does; it returns ErrInvalid for bad input and on
// a Redlock Client (independent nodes have no one counter for terms), and
// a wrapped Redis error if Redis cannot answer. A failed call leaves no
// leadership behind. The options are those of Acquire, except that a
// leadership is always one lock of the whole key: WithLimit and WithShared
// given to Campaign are ErrInvalid, and a Client's defaults of them do not
// apply. WithFencing and WithMetadata are set by Campaign, and the token
// too (WithToken does not apply): a random one that begins with "leader/",
// so that a lock of another kind on the key is not a leader.
func (c *Client) Campaign(ctx context.Context, key string, ttl time.Duration, value string, opts ...Option) (*Leadership, error) {
	if c != nil && c.nodes != nil {
		return nil, fmt.Errorf("%w: Campaign on a Redlock Client: independent nodes have no one counter for terms", ErrInvalid)
	}
	if o := (options{}).with(opts); o.limitSet || o.shared {
		return nil, fmt.Errorf("%w: Campaign on %q with WithLimit or WithShared: a leadership is one lock of the whole key", ErrInvalid, key)
	}
	opts = append(opts[:len(opts):len(opts)], WithFencing(), WithMetadata(value), leadership())
	l, err := c.Acquire(ctx, key, ttl, opts...)
	if err != nil {
		return nil, err
	}
	kctx, stop := l.KeepAlive(context.Background())
	lctx, cancel := context.WithCancelCause(context.Background())
	ld := &Leadership{lock: l, ctx: lctx, cancel: cancel, stop: stop, value: value}
	// Its end is announced on a goroutine that Close waits for (the
	// KeepAlive ends by Close at the latest); not when Close ended it.
	if c.observers.add(1) {
		context.AfterFunc(kctx, func() {
			defer c.observers.done()
			cause := context.Cause(kctx)
			cancel(cause)
			if !errors.Is(cause, ErrClosed) {
				c.announceLeader(key) // lost: observers read the state again
			}
		})
	} else {
		context.AfterFunc(kctx, func() { cancel(context.Cause(kctx)) })
	}
	c.announceLeader(key)
	return ld, nil
}

// leadership makes an acquire Campaign's: one lock of the whole key,
// whatever the Client's defaults, with a random token that begins with
// leaderToken.
func leadership() Option {
	return optionFunc(func(o *options) {
		o.limit, o.limitSet, o.shared = 0, false, false
		o.token, o.tokenSet, o.tokenPrefix = "", false, leaderToken
	})
}

// leadWith runs fn with ctx while leading ld; if fn panics, ld resigns
// (the next candidate leads at once), and the panic goes on.
func leadWith(ctx context.Context, ld *Leadership, fn func(ctx context.Context) error) error {
	returned := false
	defer func() {
		if !returned {
			_ = ld.Resign(context.Background())
		}
	}()
	err := fn(ctx)
	returned = true
	return err
}

// announceLeader tells key's observers that its leader or value changed.
// It is best effort: observers also look when a lease would end.
func (c *Client) announceLeader(key string) {
	ctx, cancel := context.WithTimeout(context.Background(), lateCleanupTimeout)
	defer cancel()
	_, _ = c.d.Do(ctx, "", "publish", leaderChannel(key), leaderChanged)
}

// Context returns a context that is cancelled when the leadership ends:
// with a cause matching ErrLost when it is lost (a renewal found the lock
// gone, or its local deadline passed while Redis could not be reached),
// ErrNotHeld after Resign, ErrClosed when the Client is closed. Work done
// as the leader should watch it.
func (l *Leadership) Context() context.Context { return l.ctx }

// Term returns the leadership's term: a number strictly greater than that
// of every earlier leader of the key. Send it with every write done as the
// leader, and have storage reject a term lower than one it has seen: that
// rejects a deposed leader's late writes.
func (l *Leadership) Term() int64 { return l.lock.Fence() }

// Value returns the value this leader published last.
func (l *Leadership) Value() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.value
}

// Proclaim publishes value as the leader's, without a new election (the
// term stays), in one round trip, and tells the observers. It blocks until
// Redis answers. It returns an error matching ErrNotHeld when the caller
// no longer leads, and a wrapped Redis error if Redis cannot answer.
func (l *Leadership) Proclaim(ctx context.Context, value string) error {
	if l.ctx.Err() != nil {
		return fmt.Errorf("%w: %q: no longer the leader (%w)", ErrNotHeld, l.lock.key, context.Cause(l.ctx))
	}
	lk := l.lock
	n, err := asInt64(proclaimScript.Run(ctx, lk.c.d, []string{lk.key}, lk.tok(), value, leaderChannel(lk.key), leaderChanged))
	if err != nil {
		return opError("proclaim", lk.key, err)
	}
	if n == 0 {
		// Lost (expired, broken, deleted): its Context ends now, not at the
		// next renewal.
		l.cancel(fmt.Errorf("%w: %q: proclaim found the leadership gone", ErrLost, lk.key))
		lk.lose(fmt.Errorf("%w: %q: proclaim found it no longer ours", ErrLost, lk.key), false)
		return fmt.Errorf("%w: %q: no longer the leader", ErrNotHeld, lk.key)
	}
	l.mu.Lock()
	l.value = value
	l.mu.Unlock()
	lk.mu.Lock()
	lk.x.proclaimed = &value
	lk.mu.Unlock()
	return nil
}

// Resign steps down: it releases the leadership, so that the next
// candidate leads at once (not after a ttl), and cancels Context with a
// cause matching ErrNotHeld. It blocks until Redis answers, and ignores
// the cancellation of ctx as Release does. It returns an error matching
// ErrNotHeld if the leadership was already lost or resigned, and a wrapped
// Redis error if Redis cannot be reached (the lock then expires by its
// ttl, or is released by the Client's retries).
func (l *Leadership) Resign(ctx context.Context) error {
	l.cancel(fmt.Errorf("%w: %q: resigned", ErrNotHeld, l.lock.key))
	l.stop()
	err := l.lock.Release(ctx)
	l.lock.c.announceLeader(l.lock.key)
	return err
}

// Leader returns who leads key now, read in one round trip; it blocks
// until Redis answers. It returns ErrNoLeader when nobody does (a lock on
// the key that Campaign did not take is no leader), ErrInvalid
// for bad input, and a wrapped Redis error if Redis cannot answer.
func (c *Client) Leader(ctx context.Context, key string) (LeaderInfo, error) {
	info, err := c.Inspect(ctx, key)
	if err != nil {
		return LeaderInfo{}, err
	}
	if info.Kind != "leader" {
		return LeaderInfo{}, fmt.Errorf("%w: %q", ErrNoLeader, key)
	}
	return LeaderInfo{Value: info.Metadata, Term: info.Fence, TTL: info.TTL}, nil
}

// observeIdle is how long an observer waits, at most, before it reads the
// state again without an announcement.
const observeIdle = time.Second

// observeRetry is how long an observer waits before it reads the state
// again after Redis did not answer.
const observeRetry = 100 * time.Millisecond

// Observe reports who leads key: the current state first (a zero
// LeaderInfo when nobody leads), then every change (a new leader, a new
// value, no leader) in order, until ctx is done or the Client is closed;
// then it closes the channel. It does not block. A reader that is slow gets the newest state
// (the ones between are dropped), never a stale one after a newer one.
//
// It listens for the announcements of Campaign, Proclaim, Resign and of a
// leadership that ends, and reads the state again whenever one comes,
// whenever its subscription comes back after a cut, when the leader's
// lease would end, and at least every second: so a leader that died is
// reported gone by the end of its ttl, and a lost announcement delays a
// report by a second at most. A change is a new value or term; the TTL of a report is the
// time left when it was read. While Redis cannot answer it reports
// nothing, and tries again every 100ms. Bad input (a nil or closed Client,
// a nil ctx, an empty key) returns a closed channel.
func (c *Client) Observe(ctx context.Context, key string) <-chan LeaderInfo {
	out := make(chan LeaderInfo, 1)
	if _, err := c.check(ctx, key, time.Millisecond); err != nil || !c.observers.add(2) {
		close(out)
		return out
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.life, cancel) // Close ends it too
	events := make(chan struct{}, 1)
	go func() {
		defer c.observers.done()
		c.hearLeader(ctx, leaderChannel(key), events)
	}()
	go func() {
		defer c.observers.done()
		defer close(out)
		defer stop()
		defer cancel()
		var last LeaderInfo
		first := true
		for {
			next, err := c.Leader(ctx, key)
			wait := observeRetry
			switch {
			case err == nil || errors.Is(err, ErrNoLeader):
				if first || next.Value != last.Value || next.Term != last.Term {
					send(out, next)
					first, last = false, next
				}
				wait = observeIdle // a missed announcement costs at most this
				if next.Term != 0 && next.TTL >= 0 {
					wait = min(wait, next.TTL+2*time.Millisecond) // when the lease would end
				}
			case ctx.Err() != nil:
				return
			}
			t := time.NewTimer(wait)
			select {
			case <-events:
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
			t.Stop()
		}
	}()
	return out
}

// hearLeader signals events at every message on channel, confirmation or
// error (look again), until ctx ends. After an error that is not an error
// reply it opens another connection, after observeRetry.
func (c *Client) hearLeader(ctx context.Context, channel string, events chan struct{}) {
	for ctx.Err() == nil {
		c.hearOn(ctx, channel, events)
		if ctx.Err() != nil {
			return
		}
		signal(events)
		_ = sleep(ctx, observeRetry) // ends early with ctx
	}
}

// hearOn is hearLeader on one connection, until it fails or ctx ends,
// which closes it.
func (c *Client) hearOn(ctx context.Context, channel string, events chan struct{}) {
	ps, err := c.d.PubSub(ctx, channel)
	if err != nil {
		return
	}
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer func() {
		if stop() {
			_ = ps.Close()
		}
	}()
	if ps.Subscribe(ctx, false, channel) != nil {
		return
	}
	for {
		_, err := ps.Receive(ctx, observeListen)
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			signal(events)
		case driver.IsTimeout(err):
		case isRedisError(err): // the connection is still good
			signal(events)
			_ = sleep(ctx, observeRetry)
		default:
			return
		}
	}
}

// observeListen is how long an observer's Receive waits for a message
// before it waits again.
const observeListen = time.Minute

// send puts s on out (a channel of one that only the caller sends on), in
// place of a state the reader has not taken yet.
func send(out chan LeaderInfo, s LeaderInfo) {
	select {
	case <-out:
	default:
	}
	out <- s
}

// leadershipKey is the context key under which Lead stores the Leadership
// for fn.
type leadershipKey struct{}

// LeadershipFromContext returns the Leadership under which Lead runs fn
// with ctx (or a context derived from it), or nil. Use it to read the Term
// to send with fn's writes, or to Proclaim.
func LeadershipFromContext(ctx context.Context) *Leadership {
	l, _ := ctx.Value(leadershipKey{}).(*Leadership)
	return l
}

// Lead runs fn while the caller leads key, and campaigns again when the
// leadership is lost: it campaigns (see Campaign), runs fn with a context
// that is cancelled when the leadership is lost or ctx is done, waits for
// fn to return, and then campaigns again if the leadership was lost. It
// blocks, and fn runs on Lead's goroutine; LeadershipFromContext(ctx) in fn
// is the Leadership, for its Term.
//
// It returns when ctx is done (ctx's error, after resigning if it leads),
// or when fn returns while the caller still leads (fn's error, after
// resigning): leaving on purpose always resigns, so the next candidate
// leads at once. If fn panics, Lead resigns and the panic goes on. A Redis
// error while campaigning is retried after a backoff; bad input
// (ErrInvalid), ErrUnsupported and ErrClosed end it.
func (c *Client) Lead(ctx context.Context, key string, ttl time.Duration, value string, fn func(ctx context.Context) error, opts ...Option) error {
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalid)
	}
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalid)
	}
	for attempt := 0; ; attempt++ {
		ld, err := c.Campaign(ctx, key, ttl, value, opts...)
		switch {
		case ctx.Err() != nil:
			if ld != nil {
				_ = ld.Resign(context.Background())
			}
			return ctx.Err()
		case errors.Is(err, ErrInvalid), errors.Is(err, ErrUnsupported), errors.Is(err, ErrClosed):
			return err
		case err != nil:
			if sleep(ctx, defaultBackoff(attempt)) != nil {
				return ctx.Err()
			}
			continue
		}
		attempt = -1
		fctx, cancel := context.WithCancelCause(context.WithValue(ctx, leadershipKey{}, ld))
		stopWatch := context.AfterFunc(ld.Context(), func() { cancel(context.Cause(ld.Context())) })
		ferr := leadWith(fctx, ld, fn)
		stopWatch()
		cancel(nil)
		leading := ld.Context().Err() == nil
		if ctx.Err() != nil || leading {
			_ = ld.Resign(context.Background())
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return ferr
		}
	}
}
