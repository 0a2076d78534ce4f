package padlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/padlock-go/padlock/driver"
)

// KeepAlive keeps the lock alive while the returned context is in use: the
// Client's renewal scheduler extends it by its ttl about every ttl/3. It
// does not block.
//
// The returned context is cancelled, with a cause that matches ErrLost, as
// soon as a renewal finds the lock no longer ours, and, when Redis cannot be
// reached, no later than the lock's local deadline (see Deadline, which
// counts a minimum Redis keeps the lock for): work done under the lock
// should watch it. It is also cancelled when ctx is done or the stop
// function is called, and then renewing stops.
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
	if err == nil {
		err = l.c.open("keep alive", l.key)
	}
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
		fresh := &lease{l: l, r: heldLocks{}, ttl: l.ttl, sent: l.sent, holds: l.x.bounds()}
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
		l.c.holds.remove(l)
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
	l.c.holds.relist(l) // an add dropped it if its deadline passed before
	if ls != nil {
		l.c.sched.renewedAt(ls, sent, ttl)
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

// heldLocks renews the locks kept alive (KeepAlive), as the renewer of
// their leases in the scheduler: each at a third of its ttl, and every
// one due about then in one pipeline of extends.
type heldLocks struct{}

// every is 3: a lock is renewed at a third of its ttl.
func (heldLocks) every() int { return 3 }

// renewAll extends leases: in one pipeline, except Redlock's and
// WithReplicas' (each on its own, see scheduler.solo) and those whose
// caller's Extend is in flight (it moves the deadline itself).
func (heldLocks) renewAll(s *scheduler, leases []*lease) {
	var locked, single []*lease
	var ttls []time.Duration
	var deadline time.Time
	s.mu.Lock()
	for _, ls := range leases {
		if ls.l.replicaCount() > 0 || ls.l.c.nodes != nil {
			single = append(single, ls)
			continue
		}
		if ls.l.extendMu.TryLock() {
			locked, ttls = append(locked, ls), append(ttls, ls.ttl)
			if d := ls.deadline(); deadline.IsZero() || d.Before(deadline) {
				deadline = d
			}
		}
	}
	s.mu.Unlock()
	for _, ls := range single {
		s.solo(ls, func(ls *lease) { renewOne(s, ls) })
	}
	if len(locked) == 0 {
		return
	}
	defer func() {
		for _, ls := range locked {
			ls.l.extendMu.Unlock()
		}
	}()
	ctx, cancel := context.WithDeadline(s.life, deadline)
	defer cancel()
	d := s.c.d
	learnDigests(ctx, d, locked)
	sent := time.Now()
	cmds := extendAll(ctx, d, locked, ttls, false)
	// A flushed or restarted server: send them again as EVAL, which loads
	// the scripts.
	if len(noScripts(cmds)) > 0 {
		sent = time.Now()
		cmds = extendAll(ctx, d, locked, ttls, true)
	}
	for i, ls := range locked {
		n, err := asInt64(cmds[i].Reply, cmds[i].Err)
		if err == nil && n == 1 {
			ls.l.extended(sent, ttls[i])
		}
		renewed(s, ls, n == 1, err)
	}
}

// renewed applies the outcome of a renewal of ls: extended (ok), found no
// longer ours (lost), or failed (err: to retry).
func renewed(s *scheduler, ls *lease, ok bool, err error) {
	switch {
	case err == nil && ok:
		ls.l.renewed(nil, true)
	case err == nil:
		cause := fmt.Errorf("%w: %q: renewal found it no longer ours", ErrLost, ls.l.key)
		ls.l.renewed(cause, true)
		ls.l.lose(cause, true)
	default:
		ls.l.renewed(err, true)
		s.failed(ls, err)
	}
}

// renewOne renews a lock on its own (Redlock, WithReplicas).
func renewOne(s *scheduler, ls *lease) {
	s.mu.Lock()
	ttl, deadline := ls.ttl, ls.deadline()
	s.mu.Unlock()
	ctx, cancel := context.WithDeadline(s.life, deadline)
	defer cancel()
	ok, err := ls.l.extend(ctx, ttl)
	renewed(s, ls, ok, err)
}

// lapsed ends the KeepAlives of a lock that no renewal reached Redis for
// before its local deadline.
func (heldLocks) lapsed(ls *lease, cause error) { ls.l.lose(cause, true) }

// closed ends the KeepAlives of a lock whose Client closed.
func (heldLocks) closed(ls *lease) {
	ls.l.lose(fmt.Errorf("%w: %q: keep-alive ended by Close", ErrClosed, ls.l.key), false)
}

// learnDigests learns the digest of each extend script of leases that is
// not known yet (once per process), so that their renewals go as EVALSHA.
func learnDigests(ctx context.Context, d driver.Driver, leases []*lease) {
	for _, ls := range leases {
		if script, keys, _ := ls.l.extendCall(0); script.digest() == nil {
			script.known(ctx, d, keys[0])
		}
	}
}

// extendAll sends one Batch of extends, one per lease, as EVALSHA (as
// EVAL with eval, which loads the scripts), and returns their commands.
func extendAll(ctx context.Context, d driver.Driver, leases []*lease, ttls []time.Duration, eval bool) []driver.Cmd {
	cmds := make([]driver.Cmd, len(leases))
	for i, ls := range leases {
		script, keys, args := ls.l.extendCall(ttls[i].Milliseconds())
		cmds[i] = script.batched(keys, args, eval)
	}
	d.Batch(ctx, cmds)
	return cmds
}
