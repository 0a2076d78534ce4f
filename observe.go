package padlock

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// An Observer is told what padlock's calls do: acquires and their waits,
// releases, extends, renewals, hand-offs, and the end of every hold (by a
// release, or by the loss of the lock). It is how metrics, traces and logs
// are attached (see WithObserver, WithLogger, and the padlockotel module).
//
// Every field is optional: a nil func is not called, and new fields may be
// added in later versions, so set fields by name. The funcs are called
// synchronously, possibly concurrently, so they must be safe for
// concurrent use: on the goroutine of the padlock call they describe, or,
// for what the Client's background work does (renewals, and the end of a
// hold that a renewal or a background release retry finds), on a goroutine
// of the Client that runs them one at a time, in order. Any of them may
// call the Lock's methods (Release, Extend, TTL) and the Client's; a func
// that blocks holds up the ones after it. Only the funcs that run on the
// goroutine of the caller's own call may call Close: AcquireStart,
// AcquireDone, WaitStart, WaitDone, ReleaseStart, ReleaseDone, Extend, and
// HoldEnd when the caller's Release or Extend ends the hold. Close waits
// for the Client's goroutines, and for waiters not in WaitStart, so a
// Close in HandOff, Renewal or the background work's HoldEnd would wait
// for itself. An Observer must not be changed once in use.
type Observer struct {
	// AcquireStart is called when TryAcquire, Acquire, TryAcquireMany or
	// AcquireMany (also inside TryDo and Do) starts, once its arguments are
	// checked. The context it returns (ctx, or one derived from it, with a
	// span, say) is the one the call goes on with and passes to
	// AcquireDone.
	AcquireStart func(ctx context.Context, info AcquireStartInfo) context.Context
	// AcquireDone is called when that call returns.
	AcquireDone func(ctx context.Context, info AcquireDoneInfo)
	// WaitStart is called when an Acquire finds the lock held and starts
	// to wait; WaitDone when it stops waiting (it got the lock, or gave up).
	WaitStart func(ctx context.Context, key string)
	WaitDone  func(ctx context.Context, key string)
	// HandOff is called when the lock is granted to a waiter of this
	// Client (the reply of a release of this Client, or a message, names
	// it), before the waiter wakes: on the goroutine of that release, or
	// of the Client's subscription.
	HandOff func(key string)
	// ReleaseStart is called when Release starts; the context it returns
	// goes on to the release and to ReleaseDone.
	ReleaseStart func(ctx context.Context, key string) context.Context
	// ReleaseDone is called when Release returns, with its error.
	ReleaseDone func(ctx context.Context, info ReleaseDoneInfo)
	// Extend is called when a caller's Extend returns.
	Extend func(ctx context.Context, info ExtendInfo)
	// Renewal is called after every renewal of a kept-alive lock, with the
	// error of a renewal that failed (it is retried until the lock's local
	// deadline).
	Renewal func(info RenewalInfo)
	// HoldEnd is called once for every lock acquired, when its hold ends:
	// Release deleted it or found it gone (or the background retry of a
	// failed Release did, or gave up at the lock's local deadline), or the
	// lock was lost (Lost is true). A lock that is neither released nor
	// lost, left to expire, has no HoldEnd.
	HoldEnd func(info HoldEndInfo)
}

// AcquireStartInfo describes an acquire call as it starts.
type AcquireStartInfo struct {
	Key  string        // the lock's key (the first key of a multi-key lock)
	Keys []string      // every key of a multi-key lock; nil for one key
	TTL  time.Duration // the ttl asked for
	Wait bool          // whether the call waits (Acquire, AcquireMany, Do)
}

// AcquireDoneInfo describes an acquire call as it returns.
type AcquireDoneInfo struct {
	AcquireStartInfo
	Duration time.Duration // how long the call took, waits included
	Fence    int64         // the lock's fence, when acquired WithFencing
	Err      error         // the call's error: nil when acquired
}

// Outcome is "acquired" when the call took the lock, "not_acquired" when
// another holder had it (Err matches ErrNotAcquired), and "error"
// otherwise.
func (i AcquireDoneInfo) Outcome() string {
	switch {
	case i.Err == nil:
		return "acquired"
	case errors.Is(i.Err, ErrNotAcquired):
		return "not_acquired"
	}
	return "error"
}

// ReleaseDoneInfo describes a Release as it returns.
type ReleaseDoneInfo struct {
	Key string
	Err error // nil when the lock was ours and is deleted
}

// ExtendInfo describes an Extend as it returns.
type ExtendInfo struct {
	Key string
	TTL time.Duration
	Err error
}

// RenewalInfo describes one renewal of a kept-alive lock.
type RenewalInfo struct {
	Key string
	Err error // nil when renewed; ErrLost-matching when found not ours
}

// HoldEndInfo describes the end of a lock's hold.
type HoldEndInfo struct {
	Key   string
	Held  time.Duration // from the acquire's success to the end
	Lost  bool          // the lock was lost, not released
	Cause error         // why it was lost (matches ErrLost), when Lost
}

// WithObserver adds o to the observers of the Client (passed to New) or of
// one call. Several observers (from WithObserver, WithLogger, or the
// padlockotel module) are all called, in the order given. A nil o is
// ignored.
//
// Without any observer, padlock's calls cost nothing more than a nil
// check.
func WithObserver(o *Observer) Option {
	return optionFunc(func(opts *options) { opts.obs = joinObservers(opts.obs, o) })
}

// WithLogger has padlock log to l what an operator should know: a WARN
// record when a lock is lost (a renewal, Extend or TTL found it gone: its
// key, the cause, how long it was held), a WARN when a Release fails for
// a reason other than the lock not being ours any more, and a DEBUG record
// for every failed renewal (which is retried). Without it padlock logs
// nothing. A nil l is ignored.
func WithLogger(l *slog.Logger) Option {
	if l == nil {
		return WithObserver(nil)
	}
	return WithObserver(&Observer{
		HoldEnd: func(i HoldEndInfo) {
			if i.Lost {
				l.Warn("padlock: lock lost", "key", i.Key, "cause", i.Cause, "held", i.Held)
			}
		},
		ReleaseDone: func(ctx context.Context, i ReleaseDoneInfo) {
			if i.Err != nil && !errors.Is(i.Err, ErrNotHeld) {
				l.WarnContext(ctx, "padlock: release failed", "key", i.Key, "err", i.Err)
			}
		},
		Renewal: func(i RenewalInfo) {
			if i.Err != nil && !errors.Is(i.Err, ErrLost) {
				l.Debug("padlock: renewal failed, will retry", "key", i.Key, "err", i.Err)
			}
		},
	})
}

// joinObservers returns an Observer that calls a's funcs, then b's.
func joinObservers(a, b *Observer) *Observer {
	switch {
	case b == nil:
		return a
	case a == nil:
		return b
	}
	return &Observer{
		AcquireStart: joinCtx(a.AcquireStart, b.AcquireStart),
		AcquireDone:  join2(a.AcquireDone, b.AcquireDone),
		WaitStart:    join2(a.WaitStart, b.WaitStart),
		WaitDone:     join2(a.WaitDone, b.WaitDone),
		HandOff:      join1(a.HandOff, b.HandOff),
		ReleaseStart: joinCtx(a.ReleaseStart, b.ReleaseStart),
		ReleaseDone:  join2(a.ReleaseDone, b.ReleaseDone),
		Extend:       join2(a.Extend, b.Extend),
		Renewal:      join1(a.Renewal, b.Renewal),
		HoldEnd:      join1(a.HoldEnd, b.HoldEnd),
	}
}

func join1[T any](f, g func(T)) func(T) {
	if f == nil || g == nil {
		if f == nil {
			return g
		}
		return f
	}
	return func(t T) { f(t); g(t) }
}

func join2[T any](f, g func(context.Context, T)) func(context.Context, T) {
	if f == nil || g == nil {
		if f == nil {
			return g
		}
		return f
	}
	return func(ctx context.Context, t T) { f(ctx, t); g(ctx, t) }
}

func joinCtx[T any](f, g func(context.Context, T) context.Context) func(context.Context, T) context.Context {
	if f == nil || g == nil {
		if f == nil {
			return g
		}
		return f
	}
	return func(ctx context.Context, t T) context.Context { return g(f(ctx, t), t) }
}

// observer returns the lock's observer, or nil.
func (l *Lock) observer() *Observer {
	if l.x == nil {
		return nil
	}
	return l.x.obs
}

// observeAcquire runs acquire, an acquire call of l, between the
// observer's AcquireStart and AcquireDone, and starts l's hold.
func observeAcquire(ctx context.Context, l *Lock, wait bool, acquire func(context.Context, *Lock) (*Lock, error)) (*Lock, error) {
	obs := l.x.obs
	start := AcquireStartInfo{Key: l.key, Keys: l.multi(), TTL: l.ttl, Wait: wait}
	if obs.AcquireStart != nil {
		ctx = obs.AcquireStart(ctx, start)
	}
	began := time.Now()
	got, err := acquire(ctx, l)
	done := AcquireDoneInfo{AcquireStartInfo: start, Duration: time.Since(began), Err: err}
	if err == nil {
		done.Fence = got.Fence()
		l.mu.Lock()
		l.x.acquiredAt = time.Now()
		l.mu.Unlock()
	}
	if obs.AcquireDone != nil {
		obs.AcquireDone(ctx, done)
	}
	return got, err
}

// holdEnded tells the observer, once, that l's hold ended: released, or
// lost with cause; bg says the Client's background work calls it (see
// Client.observe).
func (l *Lock) holdEnded(lost bool, cause error, bg bool) {
	obs := l.observer()
	if obs == nil {
		return
	}
	l.mu.Lock()
	if l.x.holdEnded || l.x.acquiredAt.IsZero() {
		l.mu.Unlock()
		return
	}
	l.x.holdEnded = true
	held := time.Since(l.x.acquiredAt)
	l.mu.Unlock()
	if obs.HoldEnd != nil {
		info := HoldEndInfo{Key: l.key, Held: held, Lost: lost}
		if lost {
			info.Cause = cause
		}
		l.c.observe(bg, func() { obs.HoldEnd(info) })
	}
}

// renewed tells the observer the outcome of a renewal of l; bg as for
// holdEnded.
func (l *Lock) renewed(err error, bg bool) {
	if obs := l.observer(); obs != nil && obs.Renewal != nil {
		info := RenewalInfo{Key: l.key, Err: err}
		l.c.observe(bg, func() { obs.Renewal(info) })
	}
}

// observe calls f, an observer's func: now, or, when bg (the Client's
// background work is calling), on the Client's observer goroutine, so that
// f may call the Lock's methods, which wait for that work.
func (c *Client) observe(bg bool, f func()) {
	if !bg {
		f()
		return
	}
	c.calls.post(f)
}

// A dispatcher runs funcs one at a time, in the order posted, on a
// goroutine of its own that runs while it has any.
type dispatcher struct {
	mu      sync.Mutex
	queue   []func()
	running bool
	wg      sync.WaitGroup
}

func (d *dispatcher) post(f func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.queue = append(d.queue, f)
	if !d.running {
		d.running = true
		d.wg.Add(1)
		go d.run()
	}
}

func (d *dispatcher) run() {
	defer d.wg.Done()
	for {
		d.mu.Lock()
		if len(d.queue) == 0 {
			d.running = false
			d.mu.Unlock()
			return
		}
		f := d.queue[0]
		d.queue = d.queue[1:]
		d.mu.Unlock()
		f()
	}
}

// wait waits until every posted func has run.
func (d *dispatcher) wait() { d.wg.Wait() }
