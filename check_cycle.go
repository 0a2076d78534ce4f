package padlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/padlock-go/padlock/driver"
)

// checkCycle runs the lock cycle on key with two Clients like c (without
// its observer): a holder, and a waiter that the holder's release hands
// the lock to. It returns the steps and findings with the cycle's added.
// nodes are the nodes to look at (those that answered).
func (c *Client) checkCycle(ctx context.Context, key string, nodes []driver.Driver, fs []Finding) ([]Step, []Finding) {
	cy := &cycle{ctx: ctx, key: key, nodes: nodes, fs: fs, holder: c.sibling(), waiter: c.sibling()}
	defer cy.holder.Close()
	defer cy.waiter.Close()
	if c.nodes == nil {
		cy.opts = append(cy.opts, WithFencing())
	}
	cy.run(c)
	return cy.steps, cy.fs
}

// A cycle is Check's lock cycle on its key, and what it found so far.
type cycle struct {
	ctx            context.Context
	key            string
	nodes          []driver.Driver
	steps          []Step
	fs             []Finding
	holder, waiter *Client  // two Clients: the waiter is handed the lock by the holder's release
	opts           []Option // WithFencing, but on a Redlock
	first, second  *Lock    // the holder's lock, and the waiter's
	lastFence      int64    // the last fence Check was given
}

// run runs the steps in order, until one fails, and cleans up.
func (cy *cycle) run(c *Client) {
	if !cy.unused() || !cy.acquire(c) {
		return
	}
	// The waiter's Lock, made here so that its ticket is known even if
	// its wait fails (a waiter that left leaves a mark for a while).
	wl, wo, err := cy.waiter.newLock(cy.ctx, cy.key, checkTTL, append(cy.opts, WithBackoff(ExponentialBackoff(checkWait, checkWait))))
	if err != nil {
		return
	}
	defer cy.cleanup(c, wl)
	_ = cy.step("extend", func() error { return cy.first.Extend(cy.ctx, checkTTL) }) &&
		cy.step("ttl", func() error { _, err := cy.first.TTL(cy.ctx); return err }) &&
		cy.step("wait", func() error { return cy.handOff(wl, wo) }) &&
		(c.nodes != nil || cy.step("fence", cy.fenceRose)) &&
		cy.step("release", func() error { return cy.second.Release(cy.ctx) }) &&
		cy.step("inspect", cy.released)
}

// step runs f as the step name, and records it; a failure is a danger.
func (cy *cycle) step(name string, f func() error) bool {
	start := time.Now()
	err := f()
	cy.steps = append(cy.steps, Step{Name: name, Took: time.Since(start), Err: err})
	if err != nil && cy.ctx.Err() == nil {
		cy.fs = append(cy.fs, Finding{Severity: Danger, Topic: "cycle",
			Problem: fmt.Sprintf("the lock cycle failed at %s: %v", name, err),
			Fix:     "see the other findings; an ACL refusal names the permission to add"})
	}
	return err == nil
}

// inUse records that the key is someone else's: the cycle does not run.
func (cy *cycle) inUse() {
	cy.fs = append(cy.fs, Finding{Severity: Warning, Topic: "key",
		Problem: fmt.Sprintf("%q is in use (held, waited for, or with a fence counter): the lock cycle did not run, and it was left alone", cy.key),
		Fix:     "run Check on a key of its own, such as lock:padlock-doctor"})
}

// unused is the first inspect: the key must be unused on every node.
func (cy *cycle) unused() bool {
	busy := false
	if !cy.step("inspect", func() error {
		for _, r := range cy.nodes {
			info, err := inspectOn(cy.ctx, r, cy.key)
			if err != nil {
				return err
			}
			busy = busy || info.Held || info.Fence != 0 || info.Waiting != 0
		}
		return nil
	}) {
		return false
	}
	if busy {
		cy.inUse()
	}
	return !busy
}

// acquire takes the first lock, as the holder.
func (cy *cycle) acquire(c *Client) bool {
	start := time.Now()
	first, err := cy.holder.TryAcquire(cy.ctx, cy.key, checkTTL, cy.opts...)
	if errors.Is(err, ErrNotAcquired) {
		cy.inUse() // taken since the inspect: not ours to clean up
		return false
	}
	cy.step("acquire", func() error { return err })
	cy.steps[len(cy.steps)-1].Took = time.Since(start)
	if err != nil {
		// It may have incremented the counter of a key nobody used (it
		// had none), and released what it took (ErrNotReplicated).
		c.checkCleanup(cy.ctx, cy.key, cy.nodes, []any{"1"})
		return false
	}
	cy.first, cy.lastFence = first, first.Fence()
	return true
}

// handOff has the waiter's lock wl wait in another Client, and the
// holder release once it is queued: the waiter must be handed the lock.
func (cy *cycle) handOff(wl *Lock, wo options) error {
	wctx, cancel := context.WithTimeout(cy.ctx, checkWait)
	defer cancel()
	got := make(chan error, 1)
	var l *Lock
	go func() {
		var err error
		l, err = cy.waiter.acquireObserved(wctx, wl, wo)
		got <- err
	}()
	// Release once the waiter is queued (or after a while: it may wait
	// inside its Client alone).
	for range 100 {
		info, err := inspectOn(cy.ctx, cy.nodes[0], cy.key)
		if err != nil || info.Waiting > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cy.first.Release(cy.ctx); err != nil {
		cancel()
		<-got
		return fmt.Errorf("the holder's release: %w", err)
	}
	if err := <-got; err != nil {
		return fmt.Errorf("a waiter in another Client was not handed the lock within %v of the release: %w", checkWait, err)
	}
	cy.second, cy.lastFence = l, l.Fence()
	return nil
}

// fenceRose checks that the second holder's fence is above the first's.
func (cy *cycle) fenceRose() error {
	if cy.second.Fence() <= cy.first.Fence() {
		return fmt.Errorf("the second holder's fence %d is not above the first's %d", cy.second.Fence(), cy.first.Fence())
	}
	return nil
}

// released is the last inspect: the key must be free.
func (cy *cycle) released() error {
	info, err := inspectOn(cy.ctx, cy.nodes[0], cy.key)
	if err == nil && info.Held {
		err = fmt.Errorf("still held after the release")
	}
	return err
}

// cleanup releases the cycle's locks and deletes the key and its side
// keys, unless someone else used them meanwhile.
func (cy *cycle) cleanup(c *Client, wl *Lock) {
	rctx := context.WithoutCancel(cy.ctx)
	_ = cy.first.Release(rctx)
	values := []any{strconv.FormatInt(cy.lastFence, 10), cy.first.value}
	if cy.second != nil {
		_ = cy.second.Release(rctx)
		values = append(values, cy.second.value)
	}
	c.checkCleanup(cy.ctx, cy.key, cy.nodes, values, wl.ticketKey(wl.tok()))
}

// sibling returns a new Client with c's connections and defaults but no
// observer, for Check's cycle, which takes plain locks with random tokens.
func (c *Client) sibling() *Client {
	s := refusing(nil, nil)
	s.use(c.d, c.nodes, c.kinds)
	s.opts, s.borrowed = c.opts, true
	s.opts.obs, s.opts.limitSet, s.opts.shared = nil, false, false
	s.opts.token, s.opts.tokenSet = "", false // the holder and the waiter are two
	return s
}

// checkCleanup deletes key and every side key of it on each of nodes,
// unless someone else used the key meanwhile (see check_cleanup.lua):
// values are the last fence Check was given and its locks' values;
// tickets, its waiter's.
func (c *Client) checkCleanup(ctx context.Context, key string, nodes []driver.Driver, values []any, tickets ...string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	keys := append(append([]string{key}, allSideKeys(key)...), tickets...) // the counter and the queue first
	for _, r := range nodes {
		_, _ = checkCleanupScript.Run(ctx, r, keys, values...) // if it fails, the ttls free the lock
	}
}
