package padlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The renewal scheduler: one per Client, it renews every lock kept alive
// through that Client. A lock is due a renewal ttl/3 after its last
// successful acquire or extend was sent; when the scheduler wakes for the
// earliest due lock it also takes every lock that would fall due within the
// next ttl/30 of its own, and renews them all in one pipeline, one round
// trip. It runs one goroutine while it has locks to renew, and at most one
// pipeline at a time in another. It declares a lock lost at its local
// deadline, whether or not a pipeline is in flight.
//
// The same goroutine retries releases that could not reach Redis (see
// Lock.Release): each is sent again, with backoff, until one lands or the
// lock's local deadline passes, when it has expired by itself.

// scheduler is a Client's renewal scheduler.
type scheduler struct {
	c        *Client
	mu       sync.Mutex
	closed   bool
	leases   map[*lease]struct{}
	releases map[*Lock]*pendingRelease // releases to send again
	inflight *batch                    // the pipeline in flight, if any
	solo     map[*lease]chan struct{}  // renewals in flight on their own (see renew), closed when done
	soloWG   sync.WaitGroup            // those renewals' goroutines
	done     chan struct{}             // closed when the goroutine exits; nil while none runs
	kick     chan struct{}             // wakes the goroutine to look again
}

// A lease is a lock in the scheduler. Its fields are guarded by the
// scheduler's mu.
type lease struct {
	l       *Lock
	w       *waiter       // a waiter's ticket (see wait.go), not a held lock
	ttl     time.Duration // the lock's ttl, or the ticket's life
	sent    time.Time     // when the last successful acquire or extend was sent
	retryAt time.Time     // after a failed renewal: not before then
	err     error         // the last renewal error
	capAt   time.Time     // WithMaxHold: no renewal from then on (zero: none)
}

// due is when ls is to be renewed: a lock at a third of its ttl, a
// ticket at half its life.
func (ls *lease) due() time.Time {
	if ls.w != nil {
		return ls.sent.Add(ls.ttl / 2)
	}
	return ls.sent.Add(ls.ttl / 3)
}

// capped reports whether ls is held for its WithMaxHold at now: it is not
// renewed any more.
func (ls *lease) capped(now time.Time) bool {
	return !ls.capAt.IsZero() && !now.Before(ls.capAt)
}

// lostCause is why ls, past its local deadline at now, is lost: not
// renewed past its WithMaxHold, or no renewal reached Redis (with the
// last renewal's error). s.mu must be held.
func (ls *lease) lostCause(now time.Time) error {
	if ls.capped(now) {
		return fmt.Errorf("%w: %w: %q: not renewed past its WithMaxHold", ErrLost, ErrMaxHold, ls.l.key)
	}
	err := fmt.Errorf("%w: %q: no renewal reached Redis before the local deadline", ErrLost, ls.l.key)
	if ls.err != nil {
		err = fmt.Errorf("%w: %w", err, ls.err)
	}
	return err
}

// early is the earliest a lease may be renewed to share a pipeline.
func (ls *lease) early() time.Time { return ls.due().Add(-ls.ttl / 30) }

func (ls *lease) deadline() time.Time { return ls.sent.Add(ls.ttl - drift(ls.ttl)) }

// A pendingRelease is a release that could not reach Redis, to be sent
// again. Its fields are guarded by the scheduler's mu.
type pendingRelease struct {
	l        *Lock
	deadline time.Time // the lock's local deadline: no retry after it
	busy     bool      // being sent again now
	retryAt  time.Time
	attempt  int
}

// releaseBackoff is the wait before retry number attempt of a release:
// 50ms doubling up to a second, jittered.
var releaseBackoff = ExponentialBackoff(50*time.Millisecond, time.Second)

// A batch is one pipeline of renewals in flight.
type batch struct {
	leases []*lease
	done   chan struct{}
}

// waitFor is a channel to wait on; nil means nothing to wait for.
type waitFor <-chan struct{}

func (w waitFor) wait() {
	if w != nil {
		<-w
	}
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// add puts ls in the scheduler and starts its goroutine if needed. It
// reports false if the Client is closed.
func (s *scheduler) add(ls *lease) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.leases == nil {
		s.leases = make(map[*lease]struct{})
	}
	s.leases[ls] = struct{}{}
	s.startLocked()
	return true
}

// retryRelease has l's release sent again in the background, until it
// lands or deadline passes. It does nothing once the Client is closed.
func (s *scheduler) retryRelease(l *Lock, deadline time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if s.releases == nil {
		s.releases = make(map[*Lock]*pendingRelease)
	}
	if s.releases[l] == nil {
		s.releases[l] = &pendingRelease{l: l, deadline: deadline, retryAt: time.Now().Add(releaseBackoff(0))}
	}
	s.startLocked()
}

// dropRelease forgets a pending release of l, if any.
func (s *scheduler) dropRelease(l *Lock) {
	s.mu.Lock()
	delete(s.releases, l)
	if s.kick != nil {
		signal(s.kick) // it may have nothing left to do
	}
	s.mu.Unlock()
}

// startLocked starts the goroutine if it is not running, or wakes it to
// look again. s.mu must be held.
func (s *scheduler) startLocked() {
	if s.done == nil {
		s.done = make(chan struct{})
		s.kick = make(chan struct{}, 1)
		go s.run(s.done, s.kick)
	} else {
		signal(s.kick)
	}
}

// idleLocked reports whether the goroutine has nothing left to do and
// exits (or has exited). s.mu must be held.
func (s *scheduler) idleLocked() bool {
	return len(s.leases) == 0 && len(s.releases) == 0
}

// remove takes ls out of the scheduler. It returns what to wait for before
// no renewal of ls is in flight: the pipeline carrying it, or, if ls was
// the last lease, the scheduler's goroutine, which then exits.
func (s *scheduler) remove(ls *lease) waitFor {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.leases, ls)
	if done, ok := s.solo[ls]; ok {
		return done
	}
	if s.idleLocked() && s.done != nil {
		signal(s.kick)
		return s.done
	}
	return s.inflightFor(ls.l)
}

// settled returns what to wait for before no renewal of l is in flight.
func (s *scheduler) settled(l *Lock) waitFor {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ls, done := range s.solo {
		if ls.l == l {
			return done
		}
	}
	if s.idleLocked() && s.done != nil {
		return s.done
	}
	return s.inflightFor(l)
}

// inflightFor is settled with s.mu held.
func (s *scheduler) inflightFor(l *Lock) waitFor {
	if s.inflight == nil {
		return nil
	}
	for _, ls := range s.inflight.leases {
		if ls.l == l {
			return s.inflight.done
		}
	}
	return nil
}

// moved records a successful extend of ls sent at sent with ttl.
func (s *scheduler) moved(ls *lease, sent time.Time, ttl time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sent.After(ls.sent) {
		ls.sent, ls.ttl, ls.retryAt, ls.err = sent, ttl, time.Time{}, nil
	}
	if s.kick != nil {
		signal(s.kick)
	}
}

// close ends every lease with cause ErrClosed, abandons the pending
// releases, and waits for the goroutine.
func (s *scheduler) close() {
	s.mu.Lock()
	s.closed = true
	s.releases = nil
	if s.kick != nil {
		signal(s.kick)
	}
	leases := make([]*lease, 0, len(s.leases))
	for ls := range s.leases {
		if ls.w != nil {
			delete(s.leases, ls) // a waiter's ticket: Close wakes the waiter
			continue
		}
		leases = append(leases, ls)
	}
	done := s.done
	s.mu.Unlock()
	for _, ls := range leases {
		ls.l.lose(fmt.Errorf("%w: %q: keep-alive ended by Close", ErrClosed, ls.l.key), false)
	}
	waitFor(done).wait()
	s.soloWG.Wait()
}

// run is the scheduler's goroutine.
func (s *scheduler) run(done chan struct{}, kick chan struct{}) {
	defer close(done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	finished := make(chan *batch, 1)
	for {
		now := time.Now()
		var ready, lost []*lease // ready: may be renewed now, to share the pipeline of one that must
		mustSend := false
		var retries []*pendingRelease
		var expired []*Lock
		s.mu.Lock()
		if s.idleLocked() && s.inflight == nil {
			s.done, s.kick = nil, nil
			s.mu.Unlock()
			return
		}
		wake := now.Add(time.Hour)
		for l, pr := range s.releases {
			switch {
			case pr.busy:
				wake = earliest(wake, pr.deadline)
			case !now.Before(pr.deadline):
				delete(s.releases, l) // expired by itself: nothing to release
				expired = append(expired, l)
			case !now.Before(pr.retryAt):
				pr.busy = true
				retries = append(retries, pr)
			default:
				wake = earliest(wake, pr.retryAt)
			}
		}
		for ls := range s.leases {
			d := ls.deadline()
			if !now.Before(d) {
				lost = append(lost, ls)
				continue
			}
			wake = earliest(wake, d)
			if _, ok := s.solo[ls]; ok || s.inflight != nil || ls.capped(now) {
				continue // in flight on its own; one pipeline at a time: the rest wait for it; or held for its maximum
			}
			due := latest(ls.due(), ls.retryAt)
			wake = earliest(wake, due)
			if !now.Before(latest(ls.early(), ls.retryAt)) {
				ready = append(ready, ls)
				mustSend = mustSend || !now.Before(due)
			}
		}
		causes := make([]error, len(lost))
		for i, ls := range lost {
			delete(s.leases, ls)
			causes[i] = ls.lostCause(now)
		}
		// Only a lease that is due sends a pipeline: one sent whenever one
		// was early would carry only what came early while the last was in
		// flight, and the pipelines would shrink to that.
		if mustSend {
			b := &batch{leases: ready, done: make(chan struct{})}
			s.inflight = b
			go s.renew(b, finished)
		}
		if len(retries) > 0 {
			// Beside the renewals: a retry may wait for a Redis that is
			// still away.
			s.soloWG.Go(func() { s.retryReleases(retries) })
		}
		s.mu.Unlock()

		for i, ls := range lost {
			if ls.w != nil {
				s.c.ticketGone(ls) // lapsed: its waiter attempts, and queues again
				continue
			}
			ls.l.lose(causes[i], true)
		}
		for _, l := range expired {
			l.holdEnded(false, nil, true)
		}
		if len(lost) > 0 {
			continue
		}
		timer.Reset(time.Until(wake))
		select {
		case <-timer.C:
		case <-kick:
		case b := <-finished:
			s.mu.Lock()
			s.inflight = nil
			s.mu.Unlock()
			close(b.done)
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// renew sends one pipeline of extends for b's leases and applies the
// results, then retries b's releases. It does not hold s.mu during the
// round trips.
func (s *scheduler) renew(b *batch, finished chan<- *batch) {
	defer func() { finished <- b }()
	rdb := s.c.rdb
	var deadline time.Time
	locked := b.leases[:0:0]
	var single []*lease  // WithReplicas or Redlock: each on its own (below)
	var tickets []*lease // waiters' tickets
	s.mu.Lock()
	for _, ls := range b.leases {
		if ls.w != nil {
			tickets = append(tickets, ls)
			continue
		}
		if ls.l.replicaCount() > 0 || ls.l.c.nodes != nil {
			single = append(single, ls)
			continue
		}
		// A caller's Extend in flight moves the deadline itself.
		if ls.l.extendMu.TryLock() {
			locked = append(locked, ls)
			if d := ls.deadline(); deadline.IsZero() || d.Before(deadline) {
				deadline = d
			}
		}
	}
	ttls := make([]time.Duration, len(locked))
	for i, ls := range locked {
		ttls[i] = ls.ttl
	}
	s.mu.Unlock()
	defer func() {
		for _, ls := range locked {
			ls.l.extendMu.Unlock()
		}
	}()
	if len(tickets) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), tickets[0].ttl/2)
		s.renewTickets(ctx, tickets)
		cancel()
	}
	// Renewals that wait for more than one server (Redlock, WithReplicas)
	// run on their own, beside the pipeline and each other: a server that
	// does not answer holds up its own lease alone.
	s.mu.Lock()
	if s.solo == nil {
		s.solo = make(map[*lease]chan struct{})
	}
	for _, ls := range single {
		if _, ok := s.leases[ls]; !ok {
			continue // removed meanwhile (stop, Release): nothing renews it now
		}
		done := make(chan struct{})
		s.solo[ls] = done
		s.soloWG.Go(func() {
			s.renewOne(ls)
			s.mu.Lock()
			delete(s.solo, ls)
			if s.kick != nil {
				signal(s.kick)
			}
			s.mu.Unlock()
			close(done)
		})
	}
	s.mu.Unlock()
	if len(locked) == 0 {
		return
	}

	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	learnDigests(ctx, rdb, locked)
	sent := time.Now()
	cmds := s.extendAll(ctx, rdb, locked, ttls, false)
	// A flushed or restarted server: send them again as EVAL, which loads
	// the scripts.
	for _, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			sent = time.Now()
			cmds = s.extendAll(ctx, rdb, locked, ttls, true)
			break
		}
	}
	retry := time.Now()
	for i, ls := range locked {
		n, err := cmds[i].Int64()
		switch {
		case err == nil && n == 1:
			ls.l.extended(sent, ttls[i])
			ls.l.renewed(nil, true)
		case err == nil:
			cause := fmt.Errorf("%w: %q: renewal found it no longer ours", ErrLost, ls.l.key)
			ls.l.renewed(cause, true)
			ls.l.lose(cause, true)
		default:
			ls.l.renewed(err, true)
			s.mu.Lock()
			ls.err = err
			ls.retryAt = retry.Add(max(ttls[i]/16, time.Millisecond))
			s.mu.Unlock()
		}
	}
}

// retryReleases sends each pending release again, one at a time (there
// are few: they wait for Redis to come back), each bounded by the
// release timeout and the lock's local deadline. One that lands, or finds
// the lock not ours, is done; one that fails again waits longer.
func (s *scheduler) retryReleases(prs []*pendingRelease) {
	for _, pr := range prs {
		ctx, cancel := context.WithDeadline(context.Background(), earliest(pr.deadline, time.Now().Add(releaseTimeout)))
		_, err := pr.l.release(ctx, true, false)
		cancel()
		switch {
		case err == nil:
			pr.l.markReleased(true)
			continue
		case !retryable(err):
			s.dropRelease(pr.l)
			continue
		}
		s.mu.Lock()
		pr.attempt++
		pr.retryAt = time.Now().Add(releaseBackoff(pr.attempt))
		pr.busy = false
		if s.kick != nil {
			signal(s.kick)
		}
		s.mu.Unlock()
	}
}

// renewOne renews a lock on its own (see WithReplicas).
func (s *scheduler) renewOne(ls *lease) {
	s.mu.Lock()
	ttl, deadline := ls.ttl, ls.deadline()
	s.mu.Unlock()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	ok, err := ls.l.extend(ctx, ttl)
	switch {
	case err == nil && ok:
		ls.l.renewed(nil, true)
	case err == nil:
		cause := fmt.Errorf("%w: %q: renewal found it no longer ours", ErrLost, ls.l.key)
		ls.l.renewed(cause, true)
		ls.l.lose(cause, true)
	default:
		ls.l.renewed(err, true)
		s.mu.Lock()
		ls.err = err
		ls.retryAt = time.Now().Add(max(ttl/16, time.Millisecond))
		s.mu.Unlock()
	}
}

// learnDigests learns the digest of each extend script of leases that is
// not known yet (once per process), so that their renewals go as EVALSHA.
func learnDigests(ctx context.Context, rdb redis.UniversalClient, leases []*lease) {
	for _, ls := range leases {
		if script, keys, _ := ls.l.extendCall(0); script.digest() == nil {
			script.known(ctx, rdb, keys[0])
		}
	}
}

// extendAll sends one pipeline of extends, one per lease, as EVALSHA (as
// EVAL with eval, which loads the scripts), and returns their commands.
func (s *scheduler) extendAll(ctx context.Context, rdb redis.UniversalClient, leases []*lease, ttls []time.Duration, eval bool) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(leases))
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, ls := range leases {
			script, keys, args := ls.l.extendCall(ttls[i].Milliseconds())
			if eval {
				cmds[i] = p.Eval(ctx, script.src, keys, args...)
			} else {
				cmds[i] = script.EvalSha(ctx, p, keys, args...)
			}
		}
		return nil
	})
	if err != nil {
		// Commands the pipeline never ran carry no reply: give them its error.
		for _, cmd := range cmds {
			if cmd.Err() == nil && cmd.Val() == nil {
				cmd.SetErr(err)
			}
		}
	}
	return cmds
}
