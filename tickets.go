package padlock

import (
	"context"
	"time"

	"github.com/padlock-go/padlock/driver"
)

// Redis is the truth: a renewal of the tickets also looks whether the
// keys they wait for are there. A key deleted, evicted or expired by
// anything but padlock (an operator's DEL, another library's release, a
// PEXPIRE) frees it with nobody to grant it; a key found missing wakes
// one of its waiters here, whose attempt serves the key's queue. One
// command looks at the keys of a Cluster slot (on one server: all of
// them): an MGET of those that hold a string when held (a lock, a shared
// hold's marker), an EXISTS of a semaphore's sorted sets, asked again key
// by key (one more round trip) only when its count comes short. A waiter
// whose last attempt found its key free but the queue ahead waiting for
// something else (another key of a multi-key lock) is not woken again
// until a look finds the key held.

// A keyLook is one look at the keys of one slot and kind of value, and
// the waiters of each.
type keyLook struct {
	sets  bool // semaphores' sorted sets: EXISTS, else MGET
	keys  []string
	wakes [][]*waiter
	cmd   *driver.Cmd // its command, in the Batch that sent it
}

type keyLooks []*keyLook

// keyLooksOf groups the keys that waiters ws wait for: by slot on a
// Cluster, and by kind of value.
func keyLooksOf(c *Client, ws []*waiter) keyLooks {
	cluster := c.kind == driver.Cluster
	type group struct {
		slot uint16
		sets bool
	}
	groups := map[group]*keyLook{}
	type place struct {
		kl *keyLook
		i  int
	}
	at := map[string]place{} // where a key is in its group
	var looks keyLooks
	for _, w := range ws {
		keys := w.lock.queueKeys()
		for i := 0; i < len(keys); i += 2 {
			k := keys[i]
			g := group{sets: w.lock.kind() == kindPlace}
			if cluster {
				g.slot = slot(k)
			}
			kl := groups[g]
			if kl == nil {
				kl = &keyLook{sets: g.sets}
				groups[g] = kl
				looks = append(looks, kl)
			}
			p, ok := at[k]
			if !ok || p.kl != kl {
				p = place{kl, len(kl.keys)}
				at[k] = p
				kl.keys = append(kl.keys, k)
				kl.wakes = append(kl.wakes, nil)
			}
			kl.wakes[p.i] = append(kl.wakes[p.i], w)
		}
	}
	return looks
}

// cmds are the commands of each group's look, for a Batch (whose command
// becomes the group's cmd).
func (ks keyLooks) cmds() []driver.Cmd {
	cmds := make([]driver.Cmd, len(ks))
	for i, kl := range ks {
		name := "mget"
		if kl.sets {
			name = "exists"
		}
		cmds[i] = driver.Cmd{Key: kl.keys[0], Args: keyArgs(name, kl.keys...)}
	}
	return cmds
}

// keyArgs is the command name on keys.
func keyArgs(name string, keys ...string) []any {
	args := make([]any, 0, 1+len(keys))
	args = append(args, name)
	for _, k := range keys {
		args = append(args, k)
	}
	return args
}

// look returns, for each key looked at, its waiters and whether it is
// there; a look that failed tells nothing (the next renewal looks again).
// A count that came short is asked again key by key.
func (ks keyLooks) look(ctx context.Context, d batcher) map[string]bool {
	there := map[string]bool{}
	var short []*keyLook
	for _, kl := range ks {
		if kl.sets {
			if n, err := asInt64(kl.cmd.Reply, kl.cmd.Err); err == nil && n < int64(len(kl.keys)) {
				short = append(short, kl)
			} else if err == nil {
				for _, k := range kl.keys {
					there[k] = true
				}
			}
			continue
		}
		if vs, err := asSlice(kl.cmd.Reply, kl.cmd.Err); err == nil && len(vs) == len(kl.keys) {
			for i, v := range vs {
				there[kl.keys[i]] = v != nil
			}
		}
	}
	if len(short) == 0 {
		return there
	}
	var cmds []driver.Cmd
	for _, kl := range short {
		for _, k := range kl.keys {
			cmds = append(cmds, driver.Cmd{Key: k, Args: keyArgs("exists", k)})
		}
	}
	d.Batch(ctx, cmds)
	for _, cmd := range cmds {
		if n, err := asInt64(cmd.Reply, cmd.Err); err == nil {
			there[cmd.Key] = n == 1
		}
	}
	return there
}

// wakeFreed wakes, for each key that the look found missing, one waiter
// here that waits for nothing else (a multi-key lock: all its keys are
// missing), still waits, and did not find it free behind others since it
// was last seen held; a key found there makes its waiters' next "free"
// look count again.
func (ks keyLooks) wakeFreed(c *Client, there map[string]bool) {
	missing := func(w *waiter) bool {
		keys := w.lock.queueKeys()
		for i := 0; i < len(keys); i += 2 {
			if found, ok := there[keys[i]]; !ok || found {
				return false
			}
		}
		return true
	}
	n := &c.notify
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, kl := range ks {
		for i, k := range kl.keys {
			found, ok := there[k]
			if !ok {
				continue
			}
			woken := false // one is enough: its attempt serves the queue
			for _, w := range kl.wakes[i] {
				switch {
				case found:
					w.free = false
				case woken || w.removed || w.free || !missing(w):
				default:
					w.free = true // until its attempt says
					signal(w.wake)
					woken = true
				}
			}
		}
	}
}

// A batcher sends a Batch: a driver.Driver, or a driver.Tracking.
type batcher interface {
	Batch(ctx context.Context, cmds []driver.Cmd)
}

// tickets renews the waiters' tickets of a Client, as the renewer of
// their leases in its scheduler: a ticket is renewed at half its life,
// and every ticket due about then in one pipeline, which also looks at
// the keys they wait for.
type tickets struct{ c *Client }

// queued records that a call sent at sent found or made w's ticket in
// Redis, and keeps the ticket renewed. A renewal of the lease via says
// so only while via is still w's (not after a new token, see retoken).
func (c *Client) queued(w *waiter, sent time.Time, via *lease) {
	n := &c.notify
	n.mu.Lock()
	if w.removed || via != nil && w.lease != via {
		n.mu.Unlock()
		return
	}
	w.queued = true
	if sent.After(w.alive) {
		w.alive = sent
	}
	var fresh *lease
	if w.lease == nil {
		fresh = &lease{l: w.lock, r: tickets{c}, ttl: ticketLifeFor(w.lock.ttl), sent: sent}
		n.setLeaseLocked(w, fresh)
	}
	n.mu.Unlock()
	if fresh == nil {
		return
	}
	c.sched.add(fresh)
	n.mu.Lock()
	gone := w.removed || w.lease != fresh
	n.mu.Unlock()
	if gone {
		c.sched.remove(fresh) // it stopped waiting meanwhile
	}
}

// setLeaseLocked makes ls (nil: none) the lease of w's ticket, and returns
// the one it had. The notifier's mu must be held.
func (n *notifier) setLeaseLocked(w *waiter, ls *lease) *lease {
	old := w.lease
	if old != nil {
		delete(n.tickets, old)
	}
	w.lease = ls
	if ls != nil {
		if n.tickets == nil {
			n.tickets = make(map[*lease]*waiter)
		}
		n.tickets[ls] = w
	}
	return old
}

// every is 2: a ticket is renewed at half its life.
func (tickets) every() int { return 2 }

// renewAll renews the tickets of leases in one pipeline, looks at the keys
// they wait for, and settles each: renewed, gone (granted, or lapsed: its
// waiter attempts), or to retry.
func (t tickets) renewAll(s *scheduler, leases []*lease) {
	c, n := t.c, &t.c.notify
	ctx, cancel := context.WithTimeout(s.life, leases[0].ttl/2)
	defer cancel()
	type renewal struct {
		ls *lease
		w  *waiter
		at int // its command's index in the Batch
	}
	rs := make([]renewal, 0, len(leases))
	n.mu.Lock()
	for _, ls := range leases {
		if w := n.tickets[ls]; w != nil {
			rs = append(rs, renewal{ls: ls, w: w})
		}
	}
	ws := make([]*waiter, len(rs))
	toks := make([]string, len(rs))
	for i, r := range rs {
		ws[i], toks[i] = r.w, r.w.token
	}
	n.mu.Unlock()
	sent := time.Now()
	looks := keyLooksOf(c, ws)
	cmds := make([]driver.Cmd, 0, len(looks)+2*len(rs))
	cmds = append(cmds, looks.cmds()...)
	queues := map[string]bool{}
	for i := range rs {
		keys := rs[i].ls.l.queueKeys()
		rs[i].at = len(cmds)
		cmds = append(cmds, pexpire(rs[i].ls.l.ticketKey(toks[i]), rs[i].ls.ttl))
		for j := 1; j < len(keys); j += 2 {
			if !queues[keys[j]] {
				queues[keys[j]] = true
				cmds = append(cmds, pexpire(keys[j], queueLife))
			}
		}
	}
	c.d.Batch(ctx, cmds)
	for i, kl := range looks {
		kl.cmd = &cmds[i]
	}
	looks.wakeFreed(c, looks.look(ctx, c.d))
	for _, r := range rs {
		n, err := asInt64(cmds[r.at].Reply, cmds[r.at].Err)
		switch {
		case err == nil && n == 1:
			c.queued(r.w, sent, r.ls)
			s.renewedAt(r.ls, sent, r.ls.ttl)
		case err == nil:
			t.lapsed(r.ls, nil)
		default:
			s.failed(r.ls, err)
		}
	}
}

// pexpire is a PEXPIRE of key to ttl, for a Batch.
func pexpire(key string, ttl time.Duration) driver.Cmd {
	return driver.Cmd{Key: key, Args: []any{"pexpire", key, ttl.Milliseconds()}}
}

// lapsed handles a ticket that is no longer in Redis (granted, or
// skipped), or no longer renewed: its renewals stop, and its waiter
// attempts, which tells (and queues it again if need be).
func (t tickets) lapsed(ls *lease, _ error) {
	c := t.c
	c.sched.remove(ls)
	n := &c.notify
	n.mu.Lock()
	w := n.tickets[ls]
	if w != nil && w.lease == ls {
		n.setLeaseLocked(w, nil)
	}
	n.mu.Unlock()
	if w != nil {
		signal(w.wake)
	}
}

// closed does nothing: Close wakes the waiter, which returns ErrClosed.
func (tickets) closed(*lease) {}
