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

// quorum is how many nodes make a majority.
func (c *Client) quorum() int { return len(c.nodes)/2 + 1 }

// A nodeCall is one call on node i, r, of a Redlock.
type nodeCall func(ctx context.Context, i int, r driver.Driver) (int64, error)

// nodeTimeout is how long onNodes waits for a node's answer to a call of a
// lock of ttl: a tenth of ttl, but at least 100ms (a loaded client takes
// that long to read a reply) when half the ttl allows it, and at least
// 10ms. A reply that late leaves less of the validity, which the caller
// checks.
func nodeTimeout(ttl time.Duration) time.Duration {
	return max(ttl/10, min(100*time.Millisecond, ttl/2), 10*time.Millisecond)
}

// nodeResult is one node's answer.
type nodeResult struct {
	n   int64
	err error
}

// onNodes runs f on every node in parallel, each call with a timeout of
// nodeTimeout(ttl), and returns their answers in node order.
// It returns as soon as done, told each answer as it comes, says the
// outcome is decided (a quorum, or too many against one), after a grace
// of nodeGrace for answers on their way: so a node that does not answer
// holds up nobody; or when ctx ends. The nodes that have not answered
// then have errNoAnswer. With a nil done, or once the Client is closed, it
// waits for every node. The timeout holds on every driver (see bounded): a
// node that stops answering costs it, no more.
//
// A call of a Lock's (turns of a Lock) takes its turn on each node first
// (see nodeTurns), and its timeout counts from then. A release is not
// ended by ctx (its caller may have given up: a deferred cancel, Close;
// and a release that was never sent would leave the key held), and its
// timeout is at most releaseTimeout.
func (c *Client) onNodes(ctx context.Context, ttl time.Duration, turns nodeTurns, f nodeCall, done func(nodeResult) bool) []nodeResult {
	type answer struct {
		i int
		r nodeResult
	}
	answers := make(chan answer, len(c.nodes)) // room for every answer: no sender waits
	calls, timeout := ctx, nodeTimeout(ttl)
	if turns.release {
		calls, timeout = context.WithoutCancel(ctx), min(timeout, releaseTimeout)
	}
	tracked := c.nodeCalls.add(len(c.nodes))
	for i, node := range c.nodes {
		go func() {
			if tracked {
				defer c.nodeCalls.done()
			}
			r := nodeResult{err: errBusy}
			if turn, ok := turns.take(i); ok {
				ctx, cancel := context.WithTimeout(calls, timeout)
				r.n, r.err = f(ctx, i, node)
				r.err = reword(r.err) // in padlock's words, before the nodes' errors are joined
				cancel()
				// Before the answer: the caller's next call may take the
				// turn. A call left in flight keeps it until it is done.
				if left := unfinished(r.err); left != nil {
					go func() {
						<-left
						turns.end(i, turn)
					}()
				} else {
					turns.end(i, turn)
				}
			}
			answers <- answer{i, r}
		}()
	}
	res := make([]nodeResult, len(c.nodes))
	for i := range res {
		res[i].err = errNoAnswer
	}
	ended := ctx.Done()
	if done == nil || !tracked {
		ended = nil // every answer
	}
	var grace <-chan time.Time
	for range c.nodes {
		select {
		case a := <-answers:
			res[a.i] = a.r
			if grace == nil && tracked && done != nil && done(a.r) {
				grace = time.After(nodeGrace)
			}
			continue
		case <-grace:
		case <-ended:
		}
		break
	}
	return res
}

// nodeTurns makes a Lock's calls to one node of a Redlock take turns, one
// at a time. A release made while a call is in flight on a node waits
// there for it to answer, then runs (one release waits at a time: it
// comes after every call before it); any other call, or a second release,
// skips that node, which counts as not answering. So an acquire that
// reaches a slow node after its attempt failed, or after the lock was
// released, is undone there after it lands; and a node that does not
// answer has at most two of the Lock's calls pending, each bounded by its
// timeout.
type nodeTurns struct {
	*turnState      // the Lock's, shared by its calls; nil for a call of no Lock's
	release    bool // this call is a release: it waits for its turn
}

// turnState is what a Lock's calls to its Redlock's nodes share.
type turnState struct {
	mu   sync.Mutex
	busy []chan struct{} // per node: closed when the call in flight there ends; nil if none
	next []chan struct{} // per node: the release that waits there for its turn, if any
}

// take takes the turn on node i, and returns it, to end once the call
// answered; ok is false if the call skips the node. A call of no Lock's
// takes no turn.
func (t nodeTurns) take(i int) (turn chan struct{}, ok bool) {
	if t.turnState == nil {
		return nil, true
	}
	turn = make(chan struct{})
	t.mu.Lock()
	prev := t.busy[i]
	switch {
	case prev == nil:
		t.busy[i] = turn
	case t.release && t.next[i] == nil:
		t.next[i] = turn // the call in flight hands its turn on at its end
	default:
		t.mu.Unlock()
		return nil, false
	}
	t.mu.Unlock()
	if prev != nil {
		<-prev // bounded by that call's own timeout
	}
	return turn, true
}

// end ends turn, taken on node i, and hands it on to the release that
// waits there, if any.
func (t nodeTurns) end(i int, turn chan struct{}) {
	if t.turnState == nil {
		return
	}
	t.mu.Lock()
	t.busy[i], t.next[i] = t.next[i], nil
	t.mu.Unlock()
	close(turn)
}

// errBusy is the result of a node that a call skipped: the Lock's
// previous call there had not answered.
var errBusy = errors.New("padlock: the previous call on this node has not answered")

// turns returns how l's next call on its Redlock's nodes takes its turns:
// a release waits for them, other calls skip a busy node.
func (l *Lock) turns(release bool) nodeTurns {
	return nodeTurns{turnState: l.x.turns, release: release}
}

// decided returns a done for onNodes: the outcome is decided once a
// quorum of nodes gave an answer that yes accepts, or too many gave one
// it does not for a quorum to be left. Errors count for neither.
func (c *Client) decided(yes func(n int64) bool) func(nodeResult) bool {
	ayes, noes := 0, 0
	return func(r nodeResult) bool {
		switch {
		case r.err != nil:
		case yes(r.n):
			ayes++
		default:
			noes++
		}
		return ayes >= c.quorum() || noes > len(c.nodes)-c.quorum()
	}
}

// nodeGrace is how long onNodes waits, once the outcome is decided, for
// the answers on their way.
const nodeGrace = 5 * time.Millisecond

// errNoAnswer is the result of a node that had not answered when onNodes
// returned.
var errNoAnswer = errors.New("padlock: no answer yet")

// A tracker counts goroutines that Close waits for; none starts once it
// is closed.
type tracker struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// add counts n more goroutines, and reports false (counting none) once
// closed.
func (t *tracker) add(n int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.wg.Add(n)
	return true
}

func (t *tracker) done() { t.wg.Done() }

// close stops the counting and waits for the goroutines counted, until
// until at most (the zero time: with no bound).
func (t *tracker) close(until time.Time) {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	if until.IsZero() {
		t.wg.Wait()
		return
	}
	done := make(chan struct{})
	go func() {
		t.wg.Wait()
		close(done)
	}()
	timer := time.NewTimer(time.Until(until))
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
	}
}

// checkRedlock refuses the options Redlock cannot honour.
func (c *Client) checkRedlock(o options) error {
	switch {
	case c.nodes == nil:
		return nil
	case o.fencing:
		return fmt.Errorf("%w: WithFencing on a Redlock: independent primaries hand out no fence that is sure to be higher than every earlier one", ErrInvalid)
	case o.replicas > 0:
		return fmt.Errorf("%w: WithReplicas on a Redlock", ErrInvalid)
	}
	return nil
}

// redlockAttempt is attempt on a Redlock: the acquire script on every node
// at once, a quorum within the validity, or undo.
func (c *Client) redlockAttempt(ctx context.Context, l *Lock) (time.Duration, error) {
	sent := time.Now()
	res := c.onNodes(ctx, l.ttl, l.turns(false), func(ctx context.Context, _ int, r driver.Driver) (int64, error) {
		return l.acquireOn(ctx, r)
	}, c.decided(func(n int64) bool { return n >= 0 }))
	took, pttl := 0, time.Duration(-1)
	var errs []error
	for _, r := range res {
		switch {
		case r.err != nil:
			errs = append(errs, r.err)
		case r.n >= 0:
			took++
		default:
			if p := time.Duration(-2-r.n) * time.Millisecond; p >= 0 && (pttl < 0 || p < pttl) {
				pttl = p
			}
		}
	}
	validity := l.ttl - time.Since(sent) - drift(l.ttl)
	if took >= c.quorum() && validity > 0 {
		return 0, l.acquired(ctx, sent, 0)
	}
	held := len(c.nodes) - took - len(errs)
	// Undo the minority, and what the lost replies may have taken. A
	// token that held a quorum would have it still, every node answering;
	// but where some did not, a chosen token's earlier take may hold a
	// quorum with them, and stays, unless the nodes where its one key is
	// held elsewhere leave it none. (A node that refuses a multi-key lock
	// may still hold the token's earlier take of its other keys.)
	keep := len(errs) > 0 && l.chosenToken() && (l.multi() != nil || len(c.nodes)-held >= c.quorum())
	if (took > 0 || len(errs) > 0) && !keep {
		c.after(ctx, nil, l.cleanup)
	}
	switch {
	case took >= c.quorum():
		return -1, fmt.Errorf("%w: %q: a quorum took %v, more than its ttl allows; released", ErrNotAcquired, l.key, time.Since(sent))
	case held > len(c.nodes)-c.quorum():
		return pttl, ErrNotAcquired // a majority is held elsewhere
	case held > 0 && took+held >= c.quorum():
		// A quorum answered, split between us and a holder (a release on
		// its way, say): contention, not an outage. Look again soon.
		return min(max(pttl, 0), l.ttl/10), ErrNotAcquired
	}
	return 0, fmt.Errorf("padlock: acquire %q: %d of %d nodes, quorum %d: %w", l.key, took, len(c.nodes), c.quorum(), errors.Join(errs...))
}

// redlockCount runs f on every node and counts the nodes that answered 1,
// those that answered 0 (not ours), and joins the errors.
func (c *Client) redlockCount(ctx context.Context, ttl time.Duration, turns nodeTurns, f nodeCall) (ours, notOurs int, err error) {
	var errs []error
	for _, r := range c.onNodes(ctx, ttl, turns, f, c.decided(func(n int64) bool { return n > 0 })) {
		switch {
		case r.err != nil:
			errs = append(errs, r.err)
		case r.n > 0:
			ours++
		default:
			notOurs++
		}
	}
	return ours, notOurs, errors.Join(errs...)
}

// redlockRelease deletes the lock on every node; it reports 1 if a quorum
// still held it.
func (l *Lock) redlockRelease(ctx context.Context, undo bool) (int64, error) {
	c := l.c
	ours, notOurs, err := c.redlockCount(ctx, l.currentTTL(), l.turns(true), func(ctx context.Context, _ int, r driver.Driver) (int64, error) {
		return l.releaseOn(ctx, r, false, undo)
	})
	switch {
	case ours >= c.quorum():
		return 1, nil
	case notOurs > len(c.nodes)-c.quorum():
		return 0, nil
	}
	return 0, err
}

// redlockExtend extends the lock on every node at once, and is done when a
// quorum did, within the new validity (ok), or when too many nodes no
// longer hold it (not ok: lost), without waiting for the nodes that have
// not answered by then; an error if too many could not answer. A node
// that answered that the key is gone (it restarted empty) gets it set
// again, with what is left of the ttl, once a quorum extended it: so a
// kept-alive lock keeps its majority across restarts of a minority. A node
// that holds another token is never touched.
func (l *Lock) redlockExtend(ctx context.Context, ttl time.Duration) (bool, error) {
	c := l.c
	sent := time.Now()
	script, keys, args := l.extendCall(ttl.Milliseconds())
	res := c.onNodes(ctx, ttl, l.turns(false), func(ctx context.Context, _ int, r driver.Driver) (int64, error) {
		return asInt64(script.Run(ctx, r, keys, args...))
	}, c.decided(func(n int64) bool { return n == 1 }))
	ours, notOurs := 0, 0
	var errs []error
	for _, r := range res {
		switch {
		case r.err != nil:
			errs = append(errs, r.err)
		case r.n == 1:
			ours++
		default:
			notOurs++
		}
	}
	ok := ours >= c.quorum() && time.Since(sent) < ttl-drift(ttl)
	deadline := sent.Add(ttl - drift(ttl))
	if ok {
		l.extended(sent, ttl)
		for i, r := range res {
			l.reestablish(i, r, deadline)
		}
	}
	switch {
	case ok:
		return true, nil
	case notOurs > len(c.nodes)-c.quorum():
		return false, nil
	case ours >= c.quorum():
		return false, fmt.Errorf("a quorum extended it after its validity")
	}
	return false, errors.Join(errs...)
}

// reestablish sets the lock again on node i, until deadline (what a quorum
// still guarantees), if its answer r to an extend was that the key is gone
// (it restarted empty); not if someone took it there meanwhile, nor while
// another call of l's is in flight there (a release, say).
func (l *Lock) reestablish(i int, r nodeResult, deadline time.Time) {
	left := time.Until(deadline)
	if r.err != nil || r.n != -1 || left < time.Millisecond {
		return
	}
	turns := l.turns(false)
	turn, ok := turns.take(i)
	if !ok {
		return
	}
	defer turns.end(i, turn)
	// A Release that began meanwhile has run here, or waits for this
	// turn: a released lock is never set again.
	l.mu.Lock()
	held := l.state == stateHeld
	l.mu.Unlock()
	if !held {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(left/10, 10*time.Millisecond))
	defer cancel()
	// Best effort: the next renewal tries again.
	_, _ = l.c.nodes[i].Do(ctx, l.key, "set", l.key, l.value, "px", left.Milliseconds(), "nx")
}

// redlockTTL is the ttl a quorum still guarantees: the quorum-th longest
// among the nodes that hold the lock; -3 if fewer than a quorum do.
func (l *Lock) redlockTTL(ctx context.Context) (int64, error) {
	script, keys, args := l.pttlCall()
	return l.c.quorumPTTL(ctx, l.currentTTL(), func(ctx context.Context, _ int, r driver.Driver) (int64, error) {
		return asInt64(script.Run(ctx, r, keys, args...))
	})
}

// quorumPTTL runs pttl (a node's time left on a lock, negative if the
// node does not hold it) on every node, and returns the time a quorum
// still guarantees: the quorum-th longest among the nodes that hold it;
// -3 if fewer than a quorum do, or an error if too many could not answer
// to tell.
func (c *Client) quorumPTTL(ctx context.Context, ttl time.Duration, pttl nodeCall) (int64, error) {
	var ttls []int64
	var errs []error
	for _, r := range c.onNodes(ctx, ttl, nodeTurns{}, pttl, c.decided(func(n int64) bool { return n >= 0 })) {
		switch {
		case r.err != nil:
			errs = append(errs, r.err)
		case r.n >= 0:
			ttls = append(ttls, r.n)
		}
	}
	if len(ttls) < c.quorum() {
		if len(ttls)+len(errs) >= c.quorum() {
			return 0, errors.Join(errs...)
		}
		return -3, nil
	}
	slices.Sort(ttls)
	slices.Reverse(ttls)
	return ttls[c.quorum()-1], nil
}

func (l *Lock) currentTTL() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}
