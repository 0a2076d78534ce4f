package padlock

import (
	"context"
	"fmt"
	"sync"
	"time"
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
	life     context.Context    // the context of its round trips: ended by close
	end      context.CancelFunc //
	mu       sync.Mutex
	closed   bool
	leases   map[*lease]struct{}
	releases map[*Lock]*pendingRelease // releases to send again
	inflight *batch                    // the pipeline in flight, if any
	solos    map[*lease]chan struct{}  // renewals in flight on their own (see solo), closed when done
	soloWG   sync.WaitGroup            // those renewals' goroutines
	done     chan struct{}             // closed when the goroutine exits; nil while none runs
	kick     chan struct{}             // wakes the goroutine to look again
}

// A lease is something the scheduler keeps renewed: a held lock, or a
// waiter's ticket. Its renewer renews it (with the others of its kind) and
// is told when it lapses. Its fields are guarded by the scheduler's mu.
type lease struct {
	l       *Lock
	r       renewer
	ttl     time.Duration // the lock's ttl, or the ticket's life
	sent    time.Time     // when the last successful acquire or extend was sent
	retryAt time.Time     // after a failed renewal: not before then
	err     error         // the last renewal error
	holds   holdBounds    // a held lock's, fixed: its cap, and the minimum its deadline counts
}

// A renewer renews the leases of one kind: held locks (see keepalive.go),
// or waiters' tickets (see tickets.go).
type renewer interface {
	// renewAll renews leases, due now or soon, in as few round trips as it
	// can, and tells the scheduler of each success (s.renewedAt) or
	// failure (s.failed).
	renewAll(s *scheduler, leases []*lease)
	// lapsed is told that ls passed its local deadline unrenewed, and why;
	// the scheduler has dropped it.
	lapsed(ls *lease, cause error)
	// closed is told that the Client closed while ls was kept.
	closed(ls *lease)
	// every says how often a lease is renewed: every ttl/every.
	every() int
}

// due is when ls is to be renewed.
func (ls *lease) due() time.Time { return ls.sent.Add(ls.ttl / time.Duration(ls.r.every())) }

// lostCause is why ls, past its local deadline at now, is lost: not
// renewed past its WithMaxHold, or no renewal reached Redis (with the
// last renewal's error). s.mu must be held.
func (ls *lease) lostCause(now time.Time) error {
	if ls.holds.capped(now) {
		return fmt.Errorf("%w: %w: %q: not renewed past its WithMaxHold", ErrLost, ErrMaxHold, ls.l.key)
	}
	err := fmt.Errorf("%w: %q: no renewal reached Redis before the local deadline", ErrLost, ls.l.key)
	if ls.err != nil {
		err = fmt.Errorf("%w: %w", err, reword(ls.err))
	}
	return err
}

// early is the earliest a lease may be renewed to share a pipeline.
func (ls *lease) early() time.Time { return ls.due().Add(-ls.ttl / 30) }

// deadline is ls's local deadline: a held lock's, as Lock.Deadline says
// (counting its minimum), or a ticket's.
func (ls *lease) deadline() time.Time { return ls.holds.deadline(ls.sent, ls.ttl) }

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
	if done, ok := s.solos[ls]; ok {
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
	for ls, done := range s.solos {
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

// renewedAt records a successful renewal of ls sent at sent, for ttl.
func (s *scheduler) renewedAt(ls *lease, sent time.Time, ttl time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sent.After(ls.sent) {
		ls.sent, ls.ttl, ls.retryAt, ls.err = sent, ttl, time.Time{}, nil
	}
	if s.kick != nil {
		signal(s.kick)
	}
}

// failed records a renewal of ls that failed with err: it is tried again
// after a sixteenth of its ttl.
func (s *scheduler) failed(ls *lease, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ls.err, ls.retryAt = err, time.Now().Add(max(ls.ttl/16, time.Millisecond))
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
		leases = append(leases, ls)
		delete(s.leases, ls) // a waiter's ticket too: its goroutine may be the one closing
	}
	done := s.done
	s.mu.Unlock()
	for _, ls := range leases {
		ls.r.closed(ls)
	}
	s.end() // a round trip in flight returns now (see bounded)
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
		s.mu.Lock()
		if s.idleLocked() && s.inflight == nil {
			s.done, s.kick = nil, nil
			s.mu.Unlock()
			return
		}
		w := s.collectLocked(time.Now())
		// Only a lease that is due sends a pipeline: one sent whenever one
		// was early would carry only what came early while the last was in
		// flight, and the pipelines would shrink to that.
		if w.mustSend {
			b := &batch{leases: w.ready, done: make(chan struct{})}
			s.inflight = b
			go s.renew(b, finished)
		}
		if len(w.retries) > 0 {
			// Beside the renewals: a retry may wait for a Redis that is
			// still away.
			s.soloWG.Go(func() { s.retryReleases(w.retries) })
		}
		s.mu.Unlock()

		for i, ls := range w.lost {
			ls.r.lapsed(ls, w.causes[i])
		}
		for _, l := range w.expired {
			l.holdEnded(false, nil, true)
		}
		if len(w.lost) > 0 {
			continue
		}
		timer.Reset(time.Until(w.wake))
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

// work is what the scheduler's goroutine has to do at a moment.
type work struct {
	ready    []*lease          // may be renewed now, to share the pipeline of one that must
	mustSend bool              // one of ready is due
	lost     []*lease          // past their local deadline, dropped
	causes   []error           // why, for each of lost
	retries  []*pendingRelease // releases to send again now
	expired  []*Lock           // locks whose pending release is moot: they expired
	wake     time.Time         // when to look again
}

// collectLocked works out what is to be done at now, and drops the lost
// leases and moot releases. s.mu must be held.
func (s *scheduler) collectLocked(now time.Time) work {
	w := work{wake: now.Add(time.Hour)}
	for l, pr := range s.releases {
		switch {
		case pr.busy:
			w.wake = earliest(w.wake, pr.deadline)
		case !now.Before(pr.deadline):
			delete(s.releases, l) // expired by itself: nothing to release
			w.expired = append(w.expired, l)
		case !now.Before(pr.retryAt):
			pr.busy = true
			w.retries = append(w.retries, pr)
		default:
			w.wake = earliest(w.wake, pr.retryAt)
		}
	}
	for ls := range s.leases {
		d := ls.deadline()
		if !now.Before(d) {
			delete(s.leases, ls)
			w.lost = append(w.lost, ls)
			w.causes = append(w.causes, ls.lostCause(now))
			continue
		}
		w.wake = earliest(w.wake, d)
		if _, ok := s.solos[ls]; ok || s.inflight != nil || ls.holds.capped(now) {
			continue // in flight on its own; one pipeline at a time: the rest wait for it; or held for its maximum
		}
		due := latest(ls.due(), ls.retryAt)
		w.wake = earliest(w.wake, due)
		if !now.Before(latest(ls.early(), ls.retryAt)) {
			w.ready = append(w.ready, ls)
			w.mustSend = w.mustSend || !now.Before(due)
		}
	}
	return w
}

// renew has b's leases renewed by their renewers, one kind after the
// other, and then reports b finished.
func (s *scheduler) renew(b *batch, finished chan<- *batch) {
	defer func() { finished <- b }()
	byKind := map[renewer][]*lease{}
	var kinds []renewer
	for _, ls := range b.leases {
		if byKind[ls.r] == nil {
			kinds = append(kinds, ls.r)
		}
		byKind[ls.r] = append(byKind[ls.r], ls)
	}
	for _, r := range kinds {
		r.renewAll(s, byKind[r])
	}
}

// solo renews ls on its own goroutine with renew, beside the pipelines
// (Redlock, WithReplicas: a server that does not answer holds up its own
// lease alone), unless it was removed meanwhile.
func (s *scheduler) solo(ls *lease, renew func(*lease)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.leases[ls]; !ok {
		return // removed meanwhile (stop, Release): nothing renews it now
	}
	if s.solos == nil {
		s.solos = make(map[*lease]chan struct{})
	}
	done := make(chan struct{})
	s.solos[ls] = done
	s.soloWG.Go(func() {
		renew(ls)
		s.mu.Lock()
		delete(s.solos, ls)
		if s.kick != nil {
			signal(s.kick)
		}
		s.mu.Unlock()
		close(done)
	})
}

// retryReleases sends each pending release again, one at a time (there
// are few: they wait for Redis to come back), each bounded by the
// release timeout and the lock's local deadline. One that lands, or finds
// the lock not ours, is done; one that fails again waits longer.
func (s *scheduler) retryReleases(prs []*pendingRelease) {
	for _, pr := range prs {
		ctx, cancel := context.WithDeadline(s.life, earliest(pr.deadline, time.Now().Add(releaseTimeout)))
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
