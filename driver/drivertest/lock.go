package drivertest

import (
	"context"
	"testing"
	"time"

	"github.com/padlock-go/padlock"
)

// commonChecks run on one server, a Cluster and a Sentinel deployment.
var commonChecks = []check{
	{"LockCycle", lockCycle},
	{"Inspect", inspect},
	{"HandOff", handOff},
	{"FirstComeFirstServed", firstComeFirstServed},
	{"Fencing", fencing},
	{"Semaphore", semaphore},
	{"Shared", shared},
	{"Many", many},
	{"KeepAlive", keepAlive},
	{"ResumeBreak", resumeBreak},
	{"Election", election},
	{"Check", checkDeployment},
	{"MinHold", minHold},
	{"MaxHold", maxHold},
	{"ScriptFlush", scriptFlush},
	{"Closed", closed},
	{"FreedByOthers", freedByOthers},
}

// singleChecks run on one server only.
var singleChecks = []check{
	{"PubSubIdle", pubsubIdle},
	{"TrackingIdle", trackingIdle},
}

// lockCycle: TryAcquire, TTL, Extend, Release and Do, and what each
// returns when the lock is someone else's, released or expired.
func lockCycle(t *testing.T, p *part) {
	ctx := bounded(t)
	cs := p.clients(t, 2)
	k := key(t)
	l, err := cs[0].TryAcquire(ctx, k, time.Minute, padlock.WithMetadata("drivertest"))
	must(t, err, "TryAcquire")
	if l.Key() != k || l.Metadata() != "drivertest" || l.Token() == "" {
		t.Fatalf("the Lock: key %q, metadata %q, token %q", l.Key(), l.Metadata(), l.Token())
	}
	ttl, err := l.TTL(ctx)
	must(t, err, "TTL")
	if ttl <= 0 || ttl > time.Minute {
		t.Errorf("TTL %v, want within (0, 1m]", ttl)
	}
	_, err = cs[1].TryAcquire(ctx, k, time.Minute)
	wantErr(t, err, padlock.ErrNotAcquired, "TryAcquire of a held lock")
	must(t, l.Extend(ctx, 2*time.Minute), "Extend")
	if ttl, err = l.TTL(ctx); err != nil || ttl <= time.Minute {
		t.Errorf("TTL after Extend(2m): %v, %v", ttl, err)
	}
	must(t, l.Release(ctx), "Release")
	wantErr(t, l.Release(ctx), padlock.ErrNotHeld, "a second Release")
	wantErr(t, l.Extend(ctx, time.Minute), padlock.ErrNotHeld, "Extend after Release")
	_, err = l.TTL(ctx)
	wantErr(t, err, padlock.ErrNotHeld, "TTL after Release")

	// A lock that expires is free for the next, and no longer the first's.
	short, err := cs[0].TryAcquire(ctx, k, 50*time.Millisecond)
	must(t, err, "TryAcquire for 50ms")
	var next *padlock.Lock
	if !eventually(5*time.Second, func() bool { next, err = cs[1].TryAcquire(ctx, k, time.Minute); return err == nil }) {
		t.Fatalf("the lock of 50ms is still held after 5s: %v", err)
	}
	wantErr(t, short.Extend(ctx, time.Minute), padlock.ErrNotHeld, "Extend of an expired lock")
	must(t, next.Release(ctx), "Release")

	// Do runs its function under the lock, and releases it.
	must(t, cs[0].Do(ctx, k, time.Minute, func(ctx context.Context) error {
		if l := padlock.LockFromContext(ctx); l == nil || l.Key() != k {
			t.Errorf("Do: no Lock of %s in its function's context", k)
		}
		_, err := cs[1].TryAcquire(ctx, k, time.Minute)
		wantErr(t, err, padlock.ErrNotAcquired, "TryAcquire while Do holds the lock")
		return nil
	}), "Do")
	l, err = cs[1].TryAcquire(ctx, k, time.Minute)
	must(t, err, "TryAcquire after Do")
	must(t, l.Release(ctx), "Release")
}

// inspect: what Inspect reads of a key, free, held and waited for.
func inspect(t *testing.T, p *part) {
	ctx := bounded(t)
	cs := p.clients(t, 2)
	k := key(t)
	info, err := cs[0].Inspect(ctx, k)
	must(t, err, "Inspect of a free key")
	if info.Held || info.Waiting != 0 || info.Fence != 0 {
		t.Errorf("Inspect of a free key: %+v", info)
	}
	l, err := cs[0].TryAcquire(ctx, k, time.Minute, padlock.WithFencing(), padlock.WithMetadata("holder"))
	must(t, err, "TryAcquire")
	got := acquireLater(ctx, cs[1], k, time.Minute)
	waitQueued(t, cs[0], k, 1)
	info, err = cs[1].Inspect(ctx, k)
	must(t, err, "Inspect of a held key")
	if !info.Held || info.Kind != "lock" || info.Token != l.Token() || info.Metadata != "holder" ||
		info.Fence != l.Fence() || info.Waiting != 1 || info.TTL <= 0 {
		t.Errorf("Inspect of a held key with a waiter: %+v (holder's token %s, fence %d)", info, l.Token(), l.Fence())
	}
	must(t, l.Release(ctx), "Release")
	must(t, served(t, got, "the waiter").Release(ctx), "the waiter's Release")
}

// fencing: the fences of a key strictly increase, whichever Client takes
// it, by TryAcquire, by a hand-off to a waiter, or after a Break.
func fencing(t *testing.T, p *part) {
	ctx := bounded(t)
	cs := p.clients(t, 2, padlock.WithFencing())
	k := key(t)
	var last int64
	next := func(l *padlock.Lock, how string) {
		t.Helper()
		if l.Fence() <= last {
			t.Errorf("%s: fence %d, not above the last one, %d", how, l.Fence(), last)
		}
		last = l.Fence()
	}
	for i := range 4 {
		l, err := cs[i%2].TryAcquire(ctx, k, time.Minute)
		must(t, err, "TryAcquire %d", i)
		next(l, "TryAcquire")
		got := acquireLater(ctx, cs[(i+1)%2], k, time.Minute)
		waitQueued(t, cs[0], k, 1)
		must(t, l.Release(ctx), "Release")
		w := served(t, got, "the waiter")
		next(w, "a hand-off")
		if i < 3 {
			must(t, w.Release(ctx), "the waiter's Release")
			continue
		}
		_, err = cs[0].Break(ctx, k)
		must(t, err, "Break")
		wantErr(t, w.Extend(ctx, time.Minute), padlock.ErrNotHeld, "Extend of a broken lock")
	}
	l, err := cs[1].TryAcquire(ctx, k, time.Minute)
	must(t, err, "TryAcquire after Break")
	next(l, "TryAcquire after Break")
	must(t, l.Release(ctx), "Release")
}

// closed: a closed Client's waiters return ErrClosed and leave the queue
// in Redis; after Close, a call that would wait or keep alive returns
// ErrClosed, and Release still works.
func closed(t *testing.T, p *part) {
	ctx := bounded(t)
	cs := p.clients(t, 2)
	k := key(t)
	l, err := cs[1].TryAcquire(ctx, k, time.Minute)
	must(t, err, "TryAcquire")
	mine, err := cs[0].TryAcquire(ctx, k+":mine", time.Minute)
	must(t, err, "TryAcquire")
	got, _ := waitLater(t, ctx, cs[0], k, time.Minute)
	if p.deps == nil {
		waitQueued(t, cs[1], k, 1)
	}
	must(t, cs[0].Close(), "Close")
	w := receive(t, got, "the waiter")
	wantErr(t, w.err, padlock.ErrClosed, "a waiter when its Client closes")
	info, err := cs[1].Inspect(ctx, k)
	must(t, err, "Inspect")
	if info.Waiting != 0 {
		t.Errorf("%d waiters in Redis after Close, want 0: Close takes its waiters out", info.Waiting)
	}
	_, err = cs[0].Acquire(ctx, k, time.Minute)
	wantErr(t, err, padlock.ErrClosed, "Acquire of a held lock after Close")
	kctx, stop := mine.KeepAlive(ctx)
	defer stop()
	if kctx.Err() == nil {
		t.Error("KeepAlive after Close: a context not cancelled")
	}
	wantErr(t, context.Cause(kctx), padlock.ErrClosed, "KeepAlive after Close")
	must(t, mine.Release(ctx), "Release after Close")
	must(t, l.Release(ctx), "Release")
}

// scriptFlush: after SCRIPT FLUSH, EVALSHA answers NOSCRIPT and padlock
// sends EVAL, in every call: one at a time, in a batch (the renewals), in
// a hand-off.
func scriptFlush(t *testing.T, p *part) {
	ctx := bounded(t)
	cs := p.clients(t, 2)
	k := key(t)
	l, err := cs[0].TryAcquire(ctx, k, 300*time.Millisecond)
	must(t, err, "TryAcquire")
	p.flushScripts(t)
	must(t, l.Extend(ctx, 300*time.Millisecond), "Extend after SCRIPT FLUSH")
	kctx, stop := l.KeepAlive(ctx)
	defer stop()
	p.flushScripts(t)
	time.Sleep(700 * time.Millisecond) // two renewals, the first after the flush
	if kctx.Err() != nil {
		t.Fatalf("KeepAlive after SCRIPT FLUSH: %v", context.Cause(kctx))
	}
	got := acquireLater(ctx, cs[1], k, time.Minute)
	waitQueued(t, cs[0], k, 1)
	p.flushScripts(t)
	must(t, l.Release(ctx), "Release after SCRIPT FLUSH")
	w := served(t, got, "the waiter")
	p.flushScripts(t)
	_, err = w.TTL(ctx)
	must(t, err, "TTL after SCRIPT FLUSH")
	p.flushScripts(t)
	must(t, w.Release(ctx), "Release after SCRIPT FLUSH")
}
