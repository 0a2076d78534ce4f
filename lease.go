package padlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// KeepAlive keeps the lock alive while the returned context is in use: a
// background renewer extends it by its ttl about every ttl/3. It does not
// block.
//
// The returned context is cancelled, with a cause that matches ErrLost, as
// soon as a renewal finds the lock no longer ours, and, when Redis cannot be
// reached, no later than the lock's local deadline (see Deadline): work
// done under the lock should watch it. It is also cancelled when ctx is
// done or the stop function is called, and then renewing stops.
//
// The stop function is idempotent. It stops renewing, unless another
// KeepAlive of the same lock is still active, and waits for the renewer to
// exit. Release stops every KeepAlive of the lock; nothing renews a lock
// after Release. On a lock that is released, lost or invalid, KeepAlive
// returns a context that is already cancelled, with cause ErrNotHeld,
// ErrLost or ErrInvalid.
//
// Renewal round trips are bounded by the local deadline through their
// context; go-redis honours it only with ContextTimeoutEnabled, and
// otherwise by its ReadTimeout, which also bounds how long stop may wait
// for a renewal in flight. The loss signal does not wait for either.
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
	case l.noRenew:
		cancel(l.notHeld())
	}
	if kctx.Err() != nil {
		l.mu.Unlock()
		return kctx, done
	}
	ka := &keepAlive{cancel: cancel}
	if l.regs == nil {
		l.regs = make(map[*keepAlive]struct{})
	}
	l.regs[ka] = struct{}{}
	if l.renewer == nil {
		l.renewer = l.startRenewer(ctx)
	}
	r := l.renewer
	l.mu.Unlock()

	unwatch := context.AfterFunc(kctx, func() { l.unregister(ka) })
	var once sync.Once
	return kctx, func() {
		once.Do(func() {
			unwatch()
			cancel(context.Canceled)
			l.unregister(ka)
			if r.ctx.Err() != nil {
				<-r.done
			}
		})
	}
}

// keepAlive is one active KeepAlive call.
type keepAlive struct {
	cancel context.CancelCauseFunc
}

// unregister ends ka's share in the renewer, and halts the renewer if ka
// was the last KeepAlive of l.
func (l *Lock) unregister(ka *keepAlive) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.regs[ka]; !ok {
		return
	}
	delete(l.regs, ka)
	if len(l.regs) == 0 && l.renewer != nil {
		l.renewer.halt()
		l.renewer = nil
	}
}

// stopKeepAlives cancels every KeepAlive context of l with cause and halts
// the renewer, which it returns so the caller can wait for it once l.mu is
// unlocked. l.mu must be held.
func (l *Lock) stopKeepAlives(cause error) *renewer {
	for ka := range l.regs {
		ka.cancel(cause)
	}
	clear(l.regs)
	r := l.renewer
	if r != nil {
		r.halt()
		l.renewer = nil
	}
	return r
}

// lose marks l lost with cause (the first cause wins) and ends every
// KeepAlive of it. It does not wait for the renewer, so the renewer itself
// may call it.
func (l *Lock) lose(cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.loseLocked(cause)
}

func (l *Lock) loseLocked(cause error) {
	if l.lost == nil {
		l.lost = cause
	}
	l.stopKeepAlives(l.lost)
}

// A renewer is the goroutine that extends a lock while any KeepAlive of it
// is active, and the timer that declares the lock lost at its local
// deadline if no renewal has moved that deadline by then.
type renewer struct {
	ctx    context.Context // cancelled by halt; ends a renewal in flight
	cancel context.CancelFunc
	done   chan struct{} // closed when the goroutine has exited
	timer  *time.Timer   // fires at the lock's local deadline
	err    error         // the last renewal error, under the Lock's mu
}

// startRenewer starts l's renewer. l.mu must be held.
func (l *Lock) startRenewer(ctx context.Context) *renewer {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &renewer{ctx: rctx, cancel: cancel, done: make(chan struct{})}
	r.timer = time.AfterFunc(time.Until(l.deadline()), func() { l.expire(r) })
	go l.renew(r)
	return r
}

// halt asks the renewer to stop; it does not wait for it.
func (r *renewer) halt() {
	r.cancel()
	r.timer.Stop()
}

// wait waits for a halted renewer to exit. A nil renewer has nothing to
// wait for.
func (r *renewer) wait() {
	if r != nil {
		<-r.done
	}
}

// moved re-arms the deadline timer after a successful extend. The Lock's
// mu must be held.
func (r *renewer) moved(deadline time.Time) {
	if r.ctx.Err() == nil {
		r.timer.Reset(time.Until(deadline))
	}
}

// expire runs when r's timer fires: if the local deadline has really
// passed, the lock is lost.
func (l *Lock) expire(r *renewer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.renewer != r {
		return // halted meanwhile
	}
	if d := time.Until(l.deadline()); d > 0 {
		r.timer.Reset(d)
		return
	}
	cause := fmt.Errorf("%w: %q: no renewal reached Redis before the local deadline", ErrLost, l.key)
	if r.err != nil {
		cause = fmt.Errorf("%w: %w", cause, r.err)
	}
	l.loseLocked(cause)
}

// renew is the renewer's goroutine: it extends l about every ttl/3 after
// the last successful acquire or extend, and sooner again after an error,
// until r is halted or Redis says the lock is not ours.
func (l *Lock) renew(r *renewer) {
	defer close(r.done)
	var retryAt time.Time
	for {
		l.mu.Lock()
		next := l.sent.Add(l.ttl / 3)
		l.mu.Unlock()
		if retryAt.After(next) {
			next = retryAt
		}
		if !sleepUntil(r.ctx, next) {
			return
		}
		l.mu.Lock()
		ttl, deadline := l.ttl, l.deadline()
		l.mu.Unlock()
		ctx, cancel := context.WithDeadline(r.ctx, deadline)
		ok, err := l.extend(ctx, ttl)
		cancel()
		if r.ctx.Err() != nil {
			return
		}
		switch {
		case err == nil && ok:
			retryAt = time.Time{}
		case err == nil:
			l.lose(fmt.Errorf("%w: %q: renewal found it no longer ours", ErrLost, l.key))
			return
		default:
			l.mu.Lock()
			r.err = err
			l.mu.Unlock()
			retryAt = time.Now().Add(max(ttl/16, time.Millisecond))
		}
	}
}

// sleepUntil waits until t or until ctx is done, and reports whether ctx is
// still live.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
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
// even if fn panics.
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
// released. The lock is released even if fn panics.
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
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		rerr := l.Release(rctx)
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
