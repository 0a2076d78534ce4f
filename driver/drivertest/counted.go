package drivertest

import (
	"slices"
	"testing"

	"github.com/padlock-go/padlock"
)

// semaphore: WithLimit(2) admits two holders, refuses a third and makes
// it wait until a place is free; another limit on the same key is
// refused while anyone holds it.
func semaphore(t *testing.T, p *part) {
	ctx := bounded(t)
	cs := p.clients(t, 2)
	k := key(t)
	two := padlock.WithLimit(2)
	a, err := cs[0].TryAcquire(ctx, k, waitTTL, two)
	must(t, err, "the first place")
	b, err := cs[1].TryAcquire(ctx, k, waitTTL, two)
	must(t, err, "the second place")
	_, err = cs[0].TryAcquire(ctx, k, waitTTL, two)
	wantErr(t, err, padlock.ErrNotAcquired, "a third place of two")
	_, err = cs[0].TryAcquire(ctx, k, waitTTL, padlock.WithLimit(3))
	wantErr(t, err, padlock.ErrInvalid, "WithLimit(3) on a key held WithLimit(2)")
	info, err := cs[0].Inspect(ctx, k)
	must(t, err, "Inspect")
	if info.Kind != "semaphore" || len(info.Holders) != 2 {
		t.Errorf("Inspect of a semaphore with two holders: %+v", info)
	}
	got := acquireLater(ctx, cs[1], k, waitTTL, two, neverPoll)
	waitQueued(t, cs[0], k, 1)
	must(t, b.Extend(ctx, waitTTL), "Extend of a place")
	must(t, a.Release(ctx), "Release of a place")
	c := served(t, got, "the waiter for a place")
	for _, l := range []*padlock.Lock{b, c} {
		must(t, l.Release(ctx), "Release of a place")
	}
	if info, err = cs[0].Inspect(ctx, k); err != nil || info.Held {
		t.Errorf("Inspect after every place is released: %+v, %v", info, err)
	}
}

// shared: shared holds hold together and keep an exclusive one out; an
// exclusive waiter keeps out the shared holds that come after it, which
// are served once it releases.
func shared(t *testing.T, p *part) {
	ctx := bounded(t)
	cs := p.clients(t, 2)
	k := key(t)
	sh := padlock.WithShared()
	r1, err := cs[0].TryAcquire(ctx, k, waitTTL, sh)
	must(t, err, "a shared hold")
	r2, err := cs[1].TryAcquire(ctx, k, waitTTL, sh)
	must(t, err, "a second shared hold")
	_, err = cs[0].TryAcquire(ctx, k, waitTTL)
	wantErr(t, err, padlock.ErrNotAcquired, "an exclusive lock of a key held shared")
	if info, err := cs[0].Inspect(ctx, k); err != nil || info.Kind != "shared" || len(info.Holders) != 2 {
		t.Errorf("Inspect of two shared holds: %+v, %v", info, err)
	}
	writer := acquireLater(ctx, cs[1], k, waitTTL, neverPoll)
	waitQueued(t, cs[0], k, 1)
	reader := acquireLater(ctx, cs[0], k, waitTTL, sh, neverPoll)
	waitQueued(t, cs[0], k, 2)
	must(t, r1.Release(ctx), "Release of a shared hold")
	must(t, r2.Release(ctx), "Release of the last shared hold")
	w := served(t, writer, "the exclusive waiter")
	waitQueued(t, cs[0], k, 1)
	notYet(t, reader, "a shared waiter behind an exclusive holder")
	must(t, w.Release(ctx), "Release of the exclusive lock")
	must(t, served(t, reader, "the shared waiter").Release(ctx), "Release of a shared hold")
}

// many: TryAcquireMany takes every key or none; AcquireMany waits for a
// key held elsewhere. The keys share a hash tag (one Cluster slot).
func many(t *testing.T, p *part) {
	ctx := bounded(t)
	cs := p.clients(t, 2)
	tag := "{" + key(t) + "}"
	keys := []string{tag + ":a", tag + ":b"}
	m, err := cs[0].TryAcquireMany(ctx, keys, waitTTL)
	must(t, err, "TryAcquireMany")
	if !slices.Equal(m.Keys(), keys) {
		t.Errorf("Keys: %q, want %q", m.Keys(), keys)
	}
	_, err = cs[1].TryAcquire(ctx, keys[1], waitTTL)
	wantErr(t, err, padlock.ErrNotAcquired, "TryAcquire of a key held by a multi-key lock")
	must(t, m.Extend(ctx, waitTTL), "Extend of a multi-key lock")
	if _, err = m.TTL(ctx); err != nil {
		t.Errorf("TTL of a multi-key lock: %v", err)
	}
	must(t, m.Release(ctx), "Release of a multi-key lock")

	one, err := cs[1].TryAcquire(ctx, keys[1], waitTTL)
	must(t, err, "TryAcquire of one of the keys")
	_, err = cs[0].TryAcquireMany(ctx, append(keys, tag+":c"), waitTTL)
	wantErr(t, err, padlock.ErrNotAcquired, "TryAcquireMany with a key held")
	if info, err := cs[0].Inspect(ctx, tag+":c"); err != nil || info.Held {
		t.Errorf("a failed TryAcquireMany took %s: %+v, %v", tag+":c", info, err)
	}
	got := later(func() (*padlock.Lock, error) { return cs[0].AcquireMany(ctx, keys, waitTTL, neverPoll) })
	waitQueued(t, cs[1], keys[1], 1)
	must(t, one.Release(ctx), "Release")
	must(t, served(t, got, "AcquireMany").Release(ctx), "Release of a multi-key lock")
}
