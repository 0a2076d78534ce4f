package padlock

import (
	"context"

	"github.com/redis/go-redis/v9"
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
// the waiters (their leases) of each.
type keyLook struct {
	sets   bool // semaphores' sorted sets: EXISTS, else MGET
	keys   []string
	wakes  [][]*lease
	values *redis.SliceCmd
	exists *redis.IntCmd
}

type keyLooks []*keyLook

// keyLooks groups the keys that the tickets of leases wait for: by slot
// on a Cluster, and by kind of value.
func (c *Client) keyLooks(leases []*lease) keyLooks {
	_, cluster := c.rdb.(*redis.ClusterClient)
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
	for _, ls := range leases {
		keys := ls.l.queueKeys()
		for i := 0; i < len(keys); i += 2 {
			k := keys[i]
			g := group{sets: ls.l.kind() == "n"}
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
			kl.wakes[p.i] = append(kl.wakes[p.i], ls)
		}
	}
	return looks
}

// send queues each group's look on p.
func (ks keyLooks) send(ctx context.Context, p redis.Pipeliner) {
	for _, kl := range ks {
		if kl.sets {
			kl.exists = p.Exists(ctx, kl.keys...)
		} else {
			kl.values = p.MGet(ctx, kl.keys...)
		}
	}
}

// look returns, for each key looked at, its waiters and whether it is
// there; a look that failed tells nothing (the next renewal looks again).
// A count that came short is asked again key by key.
func (ks keyLooks) look(ctx context.Context, rdb redis.UniversalClient) map[string]bool {
	there := map[string]bool{}
	var short []*keyLook
	for _, kl := range ks {
		if kl.sets {
			if n, err := kl.exists.Result(); err == nil && n < int64(len(kl.keys)) {
				short = append(short, kl)
			} else if err == nil {
				for _, k := range kl.keys {
					there[k] = true
				}
			}
			continue
		}
		if vs, err := kl.values.Result(); err == nil && len(vs) == len(kl.keys) {
			for i, v := range vs {
				there[kl.keys[i]] = v != nil
			}
		}
	}
	if len(short) == 0 {
		return there
	}
	cmds := map[string]*redis.IntCmd{}
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, kl := range short {
			for _, k := range kl.keys {
				cmds[k] = p.Exists(ctx, k)
			}
		}
		return nil
	})
	for k, cmd := range cmds {
		if n, err := cmd.Result(); err == nil {
			there[k] = n == 1
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
	missing := func(ls *lease) bool {
		keys := ls.l.queueKeys()
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
			for _, ls := range kl.wakes[i] {
				switch {
				case found:
					ls.w.free = false
				case woken || ls.w.removed || ls.w.free || !missing(ls):
				default:
					ls.w.free = true // until its attempt says
					signal(ls.w.wake)
					woken = true
				}
			}
		}
	}
}
