package padlock

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"
)

// A LocalLock is a lock this Client holds, or one an Acquire of it waits
// for, as Client.Local reports it.
type LocalLock struct {
	Key  string   // the lock's key (a multi-key lock's first)
	Keys []string // every key of a multi-key lock; nil for one key
	// Kind is "lock", "leader" (Campaign's), "semaphore" or "shared", as
	// LockInfo's.
	Kind     string
	Waiting  bool   // an Acquire of this Client waits for it: it is not held here
	Token    string // the token it holds or waits with
	Metadata string // WithMetadata's string (a leader's value)
	Fence    int64  // a hold's fence (WithFencing), else 0
	// Since is when it was acquired (the send of the acquire that got it,
	// as Deadline counts) or when the Acquire began to wait, on this
	// process's clock.
	Since time.Time
	// Deadline is a hold's local deadline (Lock.Deadline); zero for a wait.
	Deadline time.Time
}

// Local returns what this Client holds and waits for now, longest first:
// every Lock it acquired (with any method, Campaign's leaderships
// included, and Resume's) that is not released, lost, or past its local
// deadline, and every Acquire, AcquireMany and Do that waits. It makes no
// round trip and blocks only for the Client's bookkeeping: it is this
// process's view (Locks is Redis's, for every process). It returns an
// empty slice on a closed Client with nothing held, and never fails.
func (c *Client) Local() []LocalLock {
	out := []LocalLock{}
	now := time.Now()
	c.holds.each(func(l *Lock) {
		if h, ok := l.local(now); ok {
			out = append(out, h)
		}
	})
	n := &c.notify
	n.mu.Lock()
	for _, q := range n.queues {
		for _, w := range q.waiters {
			if !w.removed {
				out = append(out, w.lock.describe(LocalLock{Waiting: true, Since: w.since}))
			}
		}
	}
	n.mu.Unlock()
	slices.SortFunc(out, func(a, b LocalLock) int {
		return cmp.Or(a.Since.Compare(b.Since), strings.Compare(a.Key, b.Key))
	})
	return out
}

// local is l as Local reports it, and whether it is held at now.
func (l *Lock) local(now time.Time) (LocalLock, bool) {
	l.mu.Lock()
	held := l.heldAt(now)
	h := LocalLock{Since: l.since, Deadline: l.deadline(), Fence: l.fence}
	var proclaimed *string
	if l.x != nil {
		proclaimed = l.x.proclaimed
	}
	l.mu.Unlock()
	h = l.describe(h)
	if proclaimed != nil {
		h.Metadata = *proclaimed
	}
	return h, held
}

// heldAt reports whether l is held at now, as far as it knows: neither
// released nor lost, and its local deadline to come. l.mu is held.
func (l *Lock) heldAt(now time.Time) bool {
	return l.state == stateHeld && l.lost == nil && now.Before(l.deadline())
}

// describe is h with what never changes in l: its keys, kind, token and
// metadata.
func (l *Lock) describe(h LocalLock) LocalLock {
	h.Key, h.Kind = l.key, "lock"
	if m := l.multi(); m != nil {
		h.Keys = append([]string(nil), m...)
	}
	h.Token, h.Metadata = splitValue(l.value)
	switch k := l.counted(); {
	case k != nil && k.shared:
		h.Kind = "shared"
	case k != nil:
		h.Kind = "semaphore"
	case strings.HasPrefix(h.Token, leaderToken):
		h.Kind = "leader"
	}
	return h
}

// holdList is the Client's Locks that are held, for Local: a list through
// the Locks themselves, so that a hold costs no allocation. A Lock leaves
// it when released or lost; one left to expire is dropped by a later add,
// which looks at the two oldest Locks in the list each time (see add): the
// list goes round twice as fast as it grows, so it holds about twice the
// Locks held at once, and those that expired since the last round. (With
// one look, a held Lock at the tail would be moved and nothing dropped:
// the list would grow with every add.)
type holdList struct {
	mu         sync.Mutex // taken before any Lock's mu, never after
	head, tail *Lock      // the newest added or looked at, the oldest
}

// holding adds l, just acquired, to the Client's holds, and returns it and
// err, as the acquire that got it returns them.
func (c *Client) holding(l *Lock, err error) (*Lock, error) {
	if err == nil {
		l.mu.Lock()
		l.since = l.sent
		l.mu.Unlock()
		c.holds.add(l)
	}
	return l, err
}

// add puts l at the head of the list, unless it is in it, and looks at
// its oldest Lock twice: one no longer held is dropped, one held is moved
// to the head.
func (h *holdList) add(l *Lock) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	for range 2 {
		t := h.tail
		if t == nil {
			break
		}
		t.mu.Lock()
		held := t.heldAt(now)
		t.mu.Unlock()
		h.unlink(t)
		if held {
			h.push(t)
		}
	}
	if !l.listed {
		h.push(l)
	}
}

// relist puts l back in the list if an add dropped it while its deadline
// had passed, and an Extend or a renewal has moved it since.
func (h *holdList) relist(l *Lock) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if l.listed {
		return
	}
	l.mu.Lock()
	held := l.heldAt(time.Now())
	l.mu.Unlock()
	if held {
		h.push(l)
	}
}

// remove takes l out of the list, if it is in it.
func (h *holdList) remove(l *Lock) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if l.listed {
		h.unlink(l)
	}
}

// push puts l, not in the list, at its head.
func (h *holdList) push(l *Lock) {
	l.listed, l.prev, l.next = true, nil, h.head
	if h.head != nil {
		h.head.prev = l
	} else {
		h.tail = l
	}
	h.head = l
}

// unlink takes l, in the list, out of it.
func (h *holdList) unlink(l *Lock) {
	if l.prev != nil {
		l.prev.next = l.next
	} else {
		h.head = l.next
	}
	if l.next != nil {
		l.next.prev = l.prev
	} else {
		h.tail = l.prev
	}
	l.listed, l.prev, l.next = false, nil, nil
}

// each calls f with every Lock in the list, under the list's lock.
func (h *holdList) each(f func(*Lock)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for l := h.head; l != nil; l = l.next {
		f(l)
	}
}
