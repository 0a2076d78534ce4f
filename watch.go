package padlock

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/padlock-go/padlock/driver"
)

// The watch: a waiter woken when something other than padlock frees its
// key.
//
// A release by padlock announces itself (a grant, or "released"), and a
// waiter knows when the holder that keeps it out expires. A key freed by
// anything else (an operator's DEL, an eviction, a FLUSHALL, another
// library) is seen by the Client's watch, one goroutine while the Client
// has waiters: per node, a connection with CLIENT TRACKING
// (driver.Tracker), on which the watch reads the keys its waiters wait
// for (the ticket renewal's look: MGET, EXISTS). A read registers a key;
// Redis then says once that it changed, and the watch reads it again,
// which registers it again, and wakes one of its waiters if it is gone
// (keyLooks.wakeFreed). An invalidation is a hint, as a grant on pub/sub
// is: the waiter's attempt looks at Redis. Keys whose node has no
// tracking (the driver is no Tracker, the Redis user may not run CLIENT
// TRACKING, the connection is down) are read every pollEvery, all in one
// Batch: a cost per Client, not per waiter. The ticket renewal's look
// stays the backstop. A Redlock does not watch: its waiters attempt on
// every node, each announcing its releases.
//
// A tracking connection follows no MOVED: a key that answers it is read
// on a tracking connection to the node the answer names.

const (
	// pollEvery is how often the keys with no tracking are read.
	pollEvery = 100 * time.Millisecond
	// watchLinger is how long the watch stays, with its connections, once
	// no waiter needs it.
	watchLinger = 2 * time.Second
	// trackRetry is how soon a tracking connection is opened again after
	// it failed or was lost; trackRefused after the server refused it
	// (an ACL rule, a server without CLIENT TRACKING).
	trackRetry   = time.Second
	trackRefused = time.Minute
	// watchTimeout bounds each of the watch's round trips.
	watchTimeout = time.Second
)

// known says how a key stands on a tracking connection.
const (
	reading    = 1 // a read of it is in flight
	registered = 2 // read, and not changed since
)

// A watcher is a Client's watch (see above). Its fields are under mu,
// which is taken alone (a tracking's invalidations take it too).
type watcher struct {
	mu      sync.Mutex
	kick    chan struct{} // look again: a waiter came, a key changed, a tracking was lost
	running bool          // the goroutine runs (done is its end)
	done    chan struct{}
	stop    context.CancelFunc // ends the round trips of the goroutine
	closed  bool
	tracks  map[string]*tracked  // by node: the address a MOVED named, or "" (the first)
	nodes   map[string]string    // a key's node, learned from a MOVED
	aside   map[string]time.Time // keys polled until then: their read on a tracking connection failed
	due     map[string]time.Time // keys to read again then, on their tracking connection: they expire
	retry   map[string]time.Time // when to open a node's tracking connection again: the running goroutine's alone
}

// A tracked is one tracking connection.
type tracked struct {
	t     driver.Tracking
	known map[string]int8 // the keys registered on it (or being read)
}

// watchKick has the watch look at the keys waited for, and starts it if
// need be. It does not block.
func (c *Client) watchKick() {
	if c.nodes != nil {
		return // a Redlock (see above)
	}
	w := &c.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	if w.kick == nil {
		w.kick = make(chan struct{}, 1)
	}
	signal(w.kick)
	if !w.running {
		w.running = true
		w.done = make(chan struct{})
		var ctx context.Context
		ctx, w.stop = context.WithCancel(context.Background())
		go c.runWatch(ctx, w.done)
	}
}

// runWatch is the watch's goroutine: it ends watchLinger after the last
// waiter, or when the Client closes.
func (c *Client) runWatch(ctx context.Context, done chan struct{}) {
	w := &c.watch
	defer close(done)
	tracker := c.tracker()
	if w.retry == nil {
		w.retry = map[string]time.Time{}
	}
	retry := w.retry // kept from one run to the next: a refusal holds for trackRefused
	var lastPoll time.Time
	lastWaiter := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		ws := c.watched()
		now := time.Now()
		if len(ws) > 0 {
			lastWaiter = now
		}
		if w.ended(len(ws) == 0 && now.Sub(lastWaiter) >= watchLinger) {
			return
		}
		p := w.plan(c.notHeldHere(ws), now)
		for node, nws := range p.byNode {
			if !c.watchOn(ctx, tracker, node, nws, retry) {
				p.polled = append(p.polled, nws...)
				if at, ok := retry[node]; ok && tracker != nil {
					p.next = min(p.next, time.Until(at))
				}
			}
		}
		p.next = min(p.next, w.dueIn())
		if len(p.polled) > 0 {
			if time.Since(lastPoll) >= pollEvery {
				lastPoll = time.Now()
				c.poll(ctx, p.polled)
			}
			p.next = min(p.next, pollEvery-time.Since(lastPoll))
		}
		timer.Reset(max(p.next, time.Millisecond))
		select {
		case <-w.kick:
		case <-timer.C:
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// tracker is the Client's driver as a driver.Tracker, or nil.
func (c *Client) tracker() driver.Tracker {
	d := c.d
	if b, ok := d.(bounded); ok {
		d = b.Driver
	}
	t, _ := d.(driver.Tracker)
	return t
}

// notHeldHere are the waiters of ws whose key no Lock of this Client
// holds (by its local deadline). The others are left to that Lock's
// release, which serves them, and to the ticket renewal's look: each
// renewal of the Lock would invalidate the key, and read it again.
func (c *Client) notHeldHere(ws []*waiter) []*waiter {
	var held map[string]bool
	now := time.Now()
	c.holds.each(func(l *Lock) {
		if l.Deadline().After(now) {
			if held == nil {
				held = map[string]bool{}
			}
			held[l.key] = true
		}
	})
	if held == nil {
		return ws
	}
	return slices.DeleteFunc(ws, func(wt *waiter) bool { return held[wt.key] })
}

// ended ends the watch, closing its tracking connections, when the Client
// is closed or idle says that no waiter needs it; it reports whether it
// did.
func (w *watcher) ended(idle bool) bool {
	w.mu.Lock()
	if !w.closed && (!idle || len(w.kick) > 0) { // a kick: a waiter came since it looked
		w.mu.Unlock()
		return false
	}
	w.running = false
	w.stop()
	tracks := w.tracks
	w.tracks = nil
	w.mu.Unlock()
	for _, tr := range tracks {
		tr.t.Close()
	}
	return true
}

// dueIn is how soon the first key to expire is to be read again.
func (w *watcher) dueIn() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	in := watchLinger
	for _, at := range w.due {
		if d := time.Until(at); d > 0 { // one past is read on the next pass on its connection
			in = min(in, d)
		}
	}
	return in
}

// A watchPlan is one pass of the watch: the waiters to look for on each
// node's tracking connection, those to poll, and how soon to pass again
// at the latest.
type watchPlan struct {
	byNode map[string][]*waiter
	polled []*waiter
	next   time.Duration
}

// plan sorts waiters ws for a pass at now, and forgets what the watch
// knew of keys that nobody waits for any more.
func (w *watcher) plan(ws []*waiter, now time.Time) watchPlan {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := watchPlan{byNode: map[string][]*waiter{}, next: watchLinger}
	watching := make(map[string]bool, len(ws))
	for _, wt := range ws {
		aside := time.Duration(0) // how long one of its keys is polled
		keys := wt.lock.queueKeys()
		for i := 0; i < len(keys); i += 2 {
			watching[keys[i]] = true
			if until, ok := w.aside[keys[i]]; ok && now.Before(until) {
				aside = max(aside, until.Sub(now))
			}
		}
		if aside > 0 {
			p.polled = append(p.polled, wt)
			p.next = min(p.next, aside)
			continue
		}
		node := w.nodes[wt.key] // a multi-key lock's keys share a slot
		p.byNode[node] = append(p.byNode[node], wt)
	}
	maps.DeleteFunc(w.due, func(k string, _ time.Time) bool { return !watching[k] })
	maps.DeleteFunc(w.nodes, func(k, _ string) bool { return !watching[k] })
	maps.DeleteFunc(w.aside, func(k string, until time.Time) bool { return !watching[k] || !now.Before(until) })
	for _, tr := range w.tracks {
		maps.DeleteFunc(tr.known, func(k string, _ int8) bool { return !watching[k] })
	}
	return p
}

// watchOn has node's tracking connection watch the keys of waiters ws:
// it reads those not registered on it. It reports false when ws must be
// polled instead: node has no tracking connection, or it failed.
func (c *Client) watchOn(ctx context.Context, tracker driver.Tracker, node string, ws []*waiter, retry map[string]time.Time) bool {
	tr := c.tracking(ctx, tracker, node, ws[0].key, retry)
	if tr == nil {
		return false
	}
	if fresh := c.unregistered(tr, ws); len(fresh) > 0 && !c.lookOn(ctx, tr, fresh) {
		c.dropTracking(node, tr)
		retry[node] = time.Now().Add(trackRetry)
		return false
	}
	return true
}

// watched are the waiters the watch looks for: every one that waits in
// this Client for a key that a Lock of this Client does not hold (a
// pending waiter: that Lock's release serves it).
func (c *Client) watched() []*waiter {
	n := &c.notify
	n.mu.Lock()
	defer n.mu.Unlock()
	var ws []*waiter
	for _, q := range n.queues {
		for _, w := range q.waiters {
			if !w.removed && !w.pending {
				ws = append(ws, w)
			}
		}
	}
	return ws
}

// tracking returns the tracking connection to node, opening one (on the
// node of key) if there is none and its retry is due; nil when there is
// none.
func (c *Client) tracking(ctx context.Context, tracker driver.Tracker, node, key string, retry map[string]time.Time) *tracked {
	w := &c.watch
	w.mu.Lock()
	tr := w.tracks[node]
	w.mu.Unlock()
	if tr != nil {
		select {
		case <-tr.t.Done(): // lost: its keys are polled until it is back
			c.dropTracking(node, tr)
			retry[node] = time.Now().Add(trackRetry)
			return nil
		default:
			return tr
		}
	}
	if tracker == nil || time.Now().Before(retry[node]) {
		return nil
	}
	tr = &tracked{known: map[string]int8{}}
	ctx, cancel := context.WithTimeout(ctx, watchTimeout)
	t, err := tracker.Track(ctx, key, func(keys []string) { c.invalidated(tr, keys) })
	cancel()
	if err != nil {
		wait := trackRetry
		if _, reply := driver.Error(err); reply {
			wait = trackRefused // NOPERM, or a server without it: not soon
		}
		retry[node] = time.Now().Add(wait)
		return nil
	}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		t.Close() // not under w.mu: its reader may be in invalidated
		return nil
	}
	defer w.mu.Unlock()
	tr.t = t
	if w.tracks == nil {
		w.tracks = map[string]*tracked{}
	}
	w.tracks[node] = tr
	delete(retry, node)
	go c.watchLoss(t) // a lost connection kicks the watch
	return tr
}

// watchLoss kicks the watch once t is lost or closed.
func (c *Client) watchLoss(t driver.Tracking) {
	<-t.Done()
	w := &c.watch
	w.mu.Lock()
	if w.kick != nil {
		signal(w.kick)
	}
	w.mu.Unlock()
}

// dropTracking closes node's tracking connection tr.
func (c *Client) dropTracking(node string, tr *tracked) {
	w := &c.watch
	w.mu.Lock()
	if w.tracks[node] == tr {
		delete(w.tracks, node)
	}
	w.mu.Unlock()
	tr.t.Close()
}

// invalidated is tr's invalidation of keys (nil: every key): they are
// registered no more, and the watch reads them again.
func (c *Client) invalidated(tr *tracked, keys []string) {
	w := &c.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	if keys == nil {
		clear(tr.known)
	}
	for _, k := range keys {
		delete(tr.known, k)
	}
	if w.kick != nil {
		signal(w.kick)
	}
}

// unregistered are the waiters of ws that wait for a key not registered
// on tr; their keys are marked as being read.
func (c *Client) unregistered(tr *tracked, ws []*waiter) []*waiter {
	w := &c.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	for k, at := range w.due {
		if !now.Before(at) && tr.known[k] == registered {
			delete(w.due, k)
			delete(tr.known, k)
		}
	}
	var fresh []*waiter
	for _, wt := range ws {
		keys := wt.lock.queueKeys()
		for i := 0; i < len(keys); i += 2 {
			if tr.known[keys[i]] == 0 {
				fresh = append(fresh, wt)
				break
			}
		}
	}
	for _, wt := range fresh {
		keys := wt.lock.queueKeys()
		for i := 0; i < len(keys); i += 2 {
			if tr.known[keys[i]] == 0 {
				tr.known[keys[i]] = reading
			}
		}
	}
	return fresh
}

// lookOn reads the keys of ws on the tracking connection tr, which
// registers them, and wakes a waiter of each key found missing. A lock's
// key is read by PTTL: one that is to expire is read again then (an
// expiry sends no invalidation until Redis finds the key expired, up to
// 100ms later). A key that answers an error is polled or read elsewhere
// (see misread). It reports false when tr failed (not a reply: tr is
// taken for lost) or is not the node it was opened for.
func (c *Client) lookOn(ctx context.Context, tr *tracked, ws []*waiter) bool {
	ctx, cancel := context.WithTimeout(ctx, watchTimeout)
	defer cancel()
	looks := keyLooksOf(c, ws)
	var sets keyLooks
	var cmds []driver.Cmd // the sets' EXISTS first, then a PTTL per lock's key
	for _, kl := range looks {
		if kl.sets {
			sets = append(sets, kl)
			cmds = append(cmds, driver.Cmd{Key: kl.keys[0], Args: keyArgs("exists", kl.keys...)})
		}
	}
	for _, kl := range looks {
		if !kl.sets {
			for _, k := range kl.keys {
				cmds = append(cmds, driver.Cmd{Key: k, Args: keyArgs("pttl", k)})
			}
		}
	}
	tr.t.Batch(ctx, cmds)
	for i, kl := range sets {
		kl.cmd = &cmds[i]
	}
	there, ok := c.registered(tr, cmds, sets)
	maps.Copy(there, sets.look(ctx, tr.t))
	looks.wakeFreed(c, there)
	return ok
}

// registered records the replies of a look on tr, cmds: the EXISTS of
// sets, then PTTL of one key each. It notes which keys are registered,
// when a PTTL's key is to expire, and which keys to poll or read
// elsewhere; it returns whether each PTTL's key is there, and false when
// tr failed.
func (c *Client) registered(tr *tracked, cmds []driver.Cmd, sets keyLooks) (map[string]bool, bool) {
	there := map[string]bool{}
	ok := true
	now := time.Now()
	w := &c.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, cmd := range cmds {
		keys := []string{cmd.Key}
		if i < len(sets) {
			keys = sets[i].keys
		}
		for _, k := range keys {
			switch _, reply := driver.Error(cmd.Err); {
			case cmd.Err == nil:
				if tr.known[k] == reading { // not invalidated meanwhile
					tr.known[k] = registered
				}
			case !reply || w.misread(tr, k, cmd.Err, now):
				delete(tr.known, k)
				ok = false
			default:
				delete(tr.known, k)
			}
		}
		if i < len(sets) || cmd.Err != nil {
			continue
		}
		if ms, err := asInt64(cmd.Reply, nil); err == nil {
			there[cmd.Key] = ms != -2
			if ms >= 0 {
				if w.due == nil {
					w.due = map[string]time.Time{}
				}
				w.due[cmd.Key] = now.Add(time.Duration(ms+1) * time.Millisecond)
			}
		}
	}
	return there, ok
}

// misread records that key k answered the error reply err on tr: it is
// polled for trackRetry, but that a MOVED to another node than tr's is
// read there from the next pass. It reports whether tr is not the node it
// was opened for (a MOVED to that very node: the client's slot map was
// stale when it was opened), to be closed. An ASK (a slot moving) is
// polled, and read again where it was. Under w.mu.
func (w *watcher) misread(tr *tracked, k string, err error, now time.Time) (stale bool) {
	if w.aside == nil {
		w.aside, w.nodes = map[string]time.Time{}, map[string]string{}
	}
	signal(w.kick) // the next pass reads it, or polls it
	if f := strings.Fields(err.Error()); len(f) >= 3 && driver.HasPrefix(err, "MOVED") {
		stale = w.tracks[f[2]] == tr
		w.nodes[k] = f[2]
		if !stale {
			return false
		}
	}
	w.aside[k] = now.Add(trackRetry)
	return stale
}

// poll reads the keys of ws through the Client's driver, and wakes a
// waiter of each key found missing.
func (c *Client) poll(ctx context.Context, ws []*waiter) {
	ctx, cancel := context.WithTimeout(ctx, watchTimeout)
	defer cancel()
	looks := keyLooksOf(c, ws)
	cmds := looks.cmds()
	c.d.Batch(ctx, cmds)
	for i, kl := range looks {
		kl.cmd = &cmds[i]
	}
	looks.wakeFreed(c, looks.look(ctx, c.d))
}

// close ends the watch, waiting for its goroutine until until.
func (w *watcher) close(until time.Time) {
	w.mu.Lock()
	w.closed = true
	done := w.done
	if w.stop != nil {
		w.stop()
	}
	if w.kick != nil {
		signal(w.kick)
	}
	w.mu.Unlock()
	if done == nil {
		return
	}
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}
