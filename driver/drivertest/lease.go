package drivertest

import (
	"context"
	"testing"
	"time"

	"github.com/padlock-go/padlock"
)

// keepAlive: KeepAlive holds several locks of one Client past their ttl
// (their renewals fall due together: one batch, a round trip per node),
// of every kind, so a batch's replies must come back each to its own
// command; a lock deleted behind padlock's back ends its own KeepAlive
// with ErrLost, and no other. TryDo keeps its lock alive while its
// function runs.
func keepAlive(t *testing.T, p *part) {
	ctx := bounded(t)
	cs := p.clients(t, 2)
	k := key(t)
	const ttl = 300 * time.Millisecond
	kinds := []struct {
		name string
		opts []padlock.Option
	}{
		{"lock", nil}, {"place", []padlock.Option{padlock.WithLimit(2)}}, {"gone", nil},
		{"shared", []padlock.Option{padlock.WithShared()}}, {"fenced", []padlock.Option{padlock.WithFencing()}},
	}
	locks := map[string]*padlock.Lock{}
	kctxs := map[string]context.Context{}
	for _, kind := range kinds {
		l, err := cs[0].TryAcquire(ctx, k+":"+kind.name, ttl, kind.opts...)
		must(t, err, "TryAcquire %s", kind.name)
		kctx, stop := l.KeepAlive(ctx)
		defer stop()
		locks[kind.name], kctxs[kind.name] = l, kctx
	}
	alive := func(when string, except string) {
		t.Helper()
		for name, kctx := range kctxs {
			if name != except && kctx.Err() != nil {
				t.Fatalf("%s: the KeepAlive of %s ended: %v", when, name, context.Cause(kctx))
			}
		}
	}
	time.Sleep(3 * ttl)
	alive("after three ttls", "")
	p.del(t, k+":gone")
	select {
	case <-kctxs["gone"].Done():
		wantErr(t, context.Cause(kctxs["gone"]), padlock.ErrLost, "the cause of a KeepAlive whose lock was deleted")
	case <-time.After(5 * time.Second):
		t.Fatal("the KeepAlive of a lock deleted behind padlock's back goes on after 5s")
	}
	time.Sleep(2 * ttl)
	alive("after a deleted lock", "gone")
	for name, l := range locks {
		if name == "gone" {
			wantErr(t, l.Release(ctx), padlock.ErrNotHeld, "Release of the deleted lock")
			continue
		}
		must(t, l.Release(ctx), "Release of %s", name)
	}

	// A second of ttl: a renewal may wait 600ms here before the lock is
	// lost (CI's -race run of a Cluster beside other packages stalled one
	// past the 200ms a 300ms ttl leaves).
	const doTTL = time.Second
	must(t, cs[1].TryDo(ctx, k+":do", doTTL, func(ctx context.Context) error {
		time.Sleep(doTTL + doTTL/2)
		return context.Cause(ctx)
	}), "TryDo for one and a half ttls")
}

// minHold: a lock taken WithMinHold and released at once stays held until
// its minimum has passed, and then serves its waiter.
func minHold(t *testing.T, p *part) {
	ctx := bounded(t)
	cs := p.clients(t, 2)
	k := key(t)
	const minimum = 600 * time.Millisecond
	start := time.Now()
	l, err := cs[0].TryAcquire(ctx, k, waitTTL, padlock.WithMinHold(minimum))
	must(t, err, "TryAcquire WithMinHold")
	must(t, l.Release(ctx), "Release under the minimum")
	_, err = cs[1].TryAcquire(ctx, k, waitTTL)
	wantErr(t, err, padlock.ErrNotAcquired, "TryAcquire of a lock released under its minimum")
	w, err := cs[1].Acquire(ctx, k, waitTTL)
	must(t, err, "Acquire of a lock released under its minimum")
	if took := time.Since(start); took < minimum-10*time.Millisecond {
		t.Errorf("the waiter got the lock %v after it was taken, before its minimum of %v", took, minimum)
	}
	must(t, w.Release(ctx), "Release")
}

// maxHold: KeepAlive stops at WithMaxHold, and its context ends with
// ErrMaxHold and ErrLost; Extend is refused after it.
func maxHold(t *testing.T, p *part) {
	ctx := bounded(t)
	c := p.client(t)
	k := key(t)
	// A 600ms ttl: under -race and load, a Redlock's renewal of a 200ms
	// lock once missed its local deadline.
	const ttl, maximum = 600 * time.Millisecond, 1500 * time.Millisecond
	start := time.Now()
	l, err := c.TryAcquire(ctx, k, ttl, padlock.WithMaxHold(maximum))
	must(t, err, "TryAcquire WithMaxHold")
	kctx, stop := l.KeepAlive(ctx)
	defer stop()
	select {
	case <-kctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("KeepAlive of a lock WithMaxHold(%v) goes on after 10s", maximum)
	}
	if took := time.Since(start); took < maximum {
		t.Errorf("KeepAlive ended %v after the lock was taken, before its maximum of %v", took, maximum)
	}
	cause := context.Cause(kctx)
	wantErr(t, cause, padlock.ErrMaxHold, "the cause of KeepAlive's end")
	wantErr(t, cause, padlock.ErrLost, "the cause of KeepAlive's end")
	wantErr(t, l.Extend(ctx, ttl), padlock.ErrMaxHold, "Extend past the maximum")
}

// resumeBreak: another Client picks a lock up by its token (Resume), with
// its fence and metadata; a chosen token (WithToken) takes its own lock
// again; Break ends the holder's lock, serves the waiter, and the fence
// goes on up.
func resumeBreak(t *testing.T, p *part) {
	ctx := bounded(t)
	cs := p.clients(t, 3)
	k := key(t)
	l, err := cs[0].TryAcquire(ctx, k, 30*time.Second, padlock.WithFencing(), padlock.WithMetadata("job"))
	must(t, err, "TryAcquire")
	r, err := cs[1].Resume(ctx, k, l.Token())
	must(t, err, "Resume")
	if r.Token() != l.Token() || r.Fence() != l.Fence() || r.Metadata() != "job" {
		t.Errorf("Resume: token %s, fence %d, metadata %q; want %s, %d, %q", r.Token(), r.Fence(), r.Metadata(), l.Token(), l.Fence(), "job")
	}
	must(t, r.Extend(ctx, time.Minute), "Extend of the resumed lock")
	if ttl, err := l.TTL(ctx); err != nil || ttl <= 30*time.Second {
		t.Errorf("TTL of the original after the resumed one's Extend(1m): %v, %v", ttl, err)
	}
	must(t, r.Release(ctx), "Release of the resumed lock")
	wantErr(t, l.Release(ctx), padlock.ErrNotHeld, "Release of the original")
	_, err = cs[1].Resume(ctx, k, l.Token())
	wantErr(t, err, padlock.ErrNotHeld, "Resume of a released lock")

	mine := padlock.WithToken("drivertest-job")
	l, err = cs[0].TryAcquire(ctx, k, 30*time.Second, mine, padlock.WithFencing())
	must(t, err, "TryAcquire WithToken")
	again, err := cs[2].TryAcquire(ctx, k, 30*time.Second, mine, padlock.WithFencing())
	must(t, err, "TryAcquire again with the holder's token")
	if again.Fence() != l.Fence() {
		t.Errorf("the token's fence taken again: %d, want its own, %d", again.Fence(), l.Fence())
	}
	got := acquireLater(ctx, cs[1], k, waitTTL, padlock.WithFencing())
	waitQueued(t, cs[0], k, 1)
	info, err := cs[2].Break(ctx, k)
	must(t, err, "Break")
	if !info.Held || info.Token != "drivertest-job" {
		t.Errorf("Break reports %+v, want the holder drivertest-job", info)
	}
	w := served(t, got, "the waiter, when the lock is broken")
	if w.Fence() <= l.Fence() {
		t.Errorf("the waiter's fence after Break: %d, want above the broken holder's, %d", w.Fence(), l.Fence())
	}
	wantErr(t, l.Extend(ctx, time.Minute), padlock.ErrNotHeld, "Extend of a broken lock")
	must(t, w.Release(ctx), "Release")
	if info, err = cs[2].Break(ctx, k); err != nil || info.Held {
		t.Errorf("Break of a free key: %+v, %v; want nothing held, no error", info, err)
	}
}
