package padlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// KeepAlive keeps the lock alive while the returned context is in use: the
// Client's renewal scheduler extends it by its ttl about every ttl/3. It
// does not block.
//
// The returned context is cancelled, with a cause that matches ErrLost, as
// soon as a renewal finds the lock no longer ours, and, when Redis cannot be
// reached, no later than the lock's local deadline (see Deadline): work
// done under the lock should watch it. It is also cancelled when ctx is
// done or the stop function is called, and then renewing stops.
//
// The stop function is idempotent. It stops renewing, unless another
// KeepAlive of the same lock is still active, and waits until no renewal
// of the lock is in flight. Release stops every KeepAlive of the lock;
// nothing renews a lock after Release. On a lock that is released, lost or
// invalid, or whose Client is closed, KeepAlive returns a context that is
// already cancelled, with cause ErrNotHeld, ErrLost, ErrInvalid or
// ErrClosed.
//
// Renewals of all the Client's locks that fall due close together go to
// Redis as one pipeline, from one goroutine per Client. Their round trips
// are bounded by go-redis's ReadTimeout (and by the local deadline with
// ContextTimeoutEnabled), which also bounds how long stop may wait; the
// loss signal does not wait for them.
func (l *Lock) KeepAlive(ctx context.Context) (context.Context, context.CancelFunc) {
	err := l.usable(ctx)
	if ctx == nil {
		ctx = context.Background()
	}
	kctx, cancel := context.WithCancelCause(ctx)
	done := func() { cancel(context.Canceled) }
	if err != nil {
		cancel(err)
		return kctx, done
	}

	l.mu.Lock()
	switch {
	case l.lost != nil:
		cancel(l.lost)
	case l.state >= stateReleasing:
		cancel(l.notHeld())
	}
	if kctx.Err() != nil {
		l.mu.Unlock()
		return kctx, done
	}
	if l.lease == nil {
		// Under l.mu, so that a concurrent Release cannot remove the lease
		// from the scheduler before it is in.
		fresh := &lease{l: l, ttl: l.ttl, sent: l.sent}
		if l.x != nil {
			fresh.capAt = l.x.capAt
		}
		if !l.c.sched.add(fresh) {
			l.mu.Unlock()
			cancel(fmt.Errorf("%w: %q: no keep-alive after Close", ErrClosed, l.key))
			return kctx, done
		}
		l.lease = fresh
	}
	ka := &keepAlive{cancel: cancel}
	l.regs = append(l.regs, ka)
	l.keptAlive = true
	l.mu.Unlock()

	unwatch := context.AfterFunc(kctx, func() { l.unregister(ka).wait() })
	var once sync.Once
	return kctx, func() {
		once.Do(func() {
			unwatch()
			cancel(context.Canceled)
			l.unregister(ka).wait()
		})
	}
}

// keepAlive is one active KeepAlive call.
type keepAlive struct {
	cancel context.CancelCauseFunc
}

// unregister ends ka's share in keeping l alive; when it was the last, l
// leaves the scheduler. It returns what the caller must wait for before
// no renewal of l can be in flight.
func (l *Lock) unregister(ka *keepAlive) waitFor {
	l.mu.Lock()
	i := slices.Index(l.regs, ka)
	if i < 0 {
		ls := l.lease
		l.mu.Unlock()
		if ls != nil {
			return nil // others still keep it alive
		}
		return l.c.sched.settled(l)
	}
	l.regs = slices.Delete(l.regs, i, i+1)
	var ls *lease
	if len(l.regs) == 0 {
		ls, l.lease = l.lease, nil
	}
	l.mu.Unlock()
	if ls == nil {
		return nil
	}
	return l.c.sched.remove(ls)
}

// stopKeepAlives cancels every KeepAlive context of l with cause and
// detaches l from the scheduler. It returns what to pass to settle once
// l.mu is unlocked. l.mu must be held.
func (l *Lock) stopKeepAlives(cause error) detached {
	for _, ka := range l.regs {
		ka.cancel(cause)
	}
	l.regs = nil
	d := detached{lease: l.lease, keptAlive: l.keptAlive}
	l.lease = nil
	return d
}

// detached is a Lock just detached from the scheduler.
type detached struct {
	lease     *lease // its lease, if it had one
	keptAlive bool   // whether it was ever kept alive
}

// settle takes d's lease out of the scheduler and returns what to wait for
// before no renewal of l can be in flight.
func (l *Lock) settle(d detached) waitFor {
	switch {
	case d.lease != nil:
		return l.c.sched.remove(d.lease)
	case d.keptAlive:
		return l.c.sched.settled(l)
	}
	return nil // never kept alive: no renewal to wait for
}

// lose marks l lost with cause (the first cause wins) and ends every
// KeepAlive of it. It does not wait, so the scheduler itself may call it;
// bg says it does (see Client.observe).
func (l *Lock) lose(cause error, bg bool) {
	l.mu.Lock()
	first := l.lost == nil
	if first {
		l.lost = cause
	}
	d := l.stopKeepAlives(l.lost)
	l.mu.Unlock()
	l.settle(d)
	if first && errors.Is(cause, ErrLost) {
		l.holdEnded(true, cause, bg)
	}
}

// extended records a successful extend sent at sent with ttl, moving the
// local deadline, and tells the scheduler.
func (l *Lock) extended(sent time.Time, ttl time.Duration) {
	l.mu.Lock()
	if sent.After(l.sent) {
		l.sent, l.ttl = sent, ttl
	}
	ls := l.lease
	l.mu.Unlock()
	if ls != nil {
		l.c.sched.moved(ls, sent, ttl)
	}
}

// TryDo makes one attempt to take the lock key for ttl, like TryAcquire;
// if it gets it, it runs fn with a context kept alive like KeepAlive's,
// then releases the lock. It blocks while fn runs.
//
// If the lock is held elsewhere, TryDo returns an error matching
// ErrNotAcquired and does not run fn. Otherwise it returns fn's error,
// joined with an error matching ErrLost if the lock was lost before fn
// returned (fn's context was then cancelled with that cause), or with the
// Release error if the lock could not be released. The lock is released
// even if fn panics, and even if ctx has ended by then (see Release).
func (c *Client) TryDo(ctx context.Context, key string, ttl time.Duration, fn func(context.Context) error, opts ...Option) error {
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalid)
	}
	l, err := c.TryAcquire(ctx, key, ttl, opts...)
	if err != nil {
		return err
	}
	return l.do(ctx, fn)
}

// Do takes the lock key for ttl, waiting like Acquire, then runs fn with a
// context kept alive like KeepAlive's, then releases the lock. It blocks
// until fn has returned and the lock is released, or until ctx ends while
// it waits.
//
// If ctx ends before the lock is taken, Do returns Acquire's error (matching
// ErrNotAcquired and ctx.Err()) and does not run fn. Otherwise it returns
// fn's error, joined with an error matching ErrLost if the lock was lost
// before fn returned, or with the Release error if the lock could not be
// released. The lock is released even if fn panics, and even if ctx has
// ended by then (see Release).
func (c *Client) Do(ctx context.Context, key string, ttl time.Duration, fn func(context.Context) error, opts ...Option) error {
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalid)
	}
	l, err := c.Acquire(ctx, key, ttl, opts...)
	if err != nil {
		return err
	}
	return l.do(ctx, fn)
}

// lockKey is the context key under which do stores the Lock for fn.
type lockKey struct{}

// LockFromContext returns the Lock held for the function that TryDo or Do
// is running with ctx (or a context derived from it), or nil. Use it to
// read the lock's Fence and Token inside the function.
func LockFromContext(ctx context.Context) *Lock {
	l, _ := ctx.Value(lockKey{}).(*Lock)
	return l
}

// do runs fn under l, kept alive, and releases l afterwards.
func (l *Lock) do(ctx context.Context, fn func(context.Context) error) (err error) {
	kctx, stop := l.KeepAlive(context.WithValue(ctx, lockKey{}, l))
	defer func() {
		lost := context.Cause(kctx)
		stop()
		rerr := l.Release(ctx) // even when ctx has ended (see Release)
		switch {
		case errors.Is(lost, ErrLost):
			err = errors.Join(err, lost)
		case errors.Is(rerr, ErrNotHeld):
			err = errors.Join(err, fmt.Errorf("%w: %q expired before it was released", ErrLost, l.key))
		case rerr != nil:
			err = errors.Join(err, rerr)
		}
	}()
	return fn(kctx)
}
