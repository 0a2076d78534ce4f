package drivertest

import (
	"context"
	"testing"
	"time"

	"github.com/padlock-go/padlock"
)

// redlockChecks run on the Redlock of three servers.
var redlockChecks = []check{
	{"LockCycle", lockCycle},
	{"Waiter", redlockWaiter},
	{"KeepAlive", redlockKeepAlive},
	{"ResumeBreak", redlockResumeBreak},
	{"MinHold", minHold},
	{"MaxHold", maxHold},
	{"Closed", closed},
}

// redlockWaiter: a waiter of another Client is woken by the release's
// announcement on the nodes' pub/sub, promptly (its backoff is an hour,
// the holder's ttl 10s); WithFencing is refused.
func redlockWaiter(t *testing.T, p *part) {
	ctx := bounded(t)
	cs := p.clients(t, 2)
	k := key(t)
	_, err := cs[0].TryAcquire(ctx, k, waitTTL, padlock.WithFencing())
	wantErr(t, err, padlock.ErrInvalid, "WithFencing on a Redlock")
	for round := range 2 {
		l, err := cs[0].TryAcquire(ctx, k, waitTTL)
		must(t, err, "round %d: TryAcquire", round)
		got, _ := waitLater(t, ctx, cs[1], k, waitTTL)
		released := time.Now()
		must(t, l.Release(ctx), "round %d: Release", round)
		w := receive(t, got, "the waiter")
		must(t, w.err, "round %d: the waiter", round)
		if took := w.at.Sub(released); took > promptly {
			t.Errorf("round %d: the waiter was served %v after the release, want within %v", round, took.Round(time.Millisecond), promptly)
		}
		must(t, w.l.Release(ctx), "round %d: the waiter's Release", round)
		time.Sleep(300 * time.Millisecond) // past the linger of the waiter's pub/sub connections
	}
}

// redlockKeepAlive: KeepAlive holds several locks on every node past
// their ttl; a lock deleted on every node ends its own KeepAlive with
// ErrLost, and no other.
func redlockKeepAlive(t *testing.T, p *part) {
	ctx := bounded(t)
	c := p.client(t)
	k := key(t)
	const ttl = 300 * time.Millisecond
	var kctxs []context.Context
	var locks []*padlock.Lock
	for i := range 3 {
		l, err := c.TryAcquire(ctx, k+":"+string(rune('a'+i)), ttl)
		must(t, err, "TryAcquire")
		kctx, stop := l.KeepAlive(ctx)
		defer stop()
		kctxs, locks = append(kctxs, kctx), append(locks, l)
	}
	time.Sleep(3 * ttl)
	for i, kctx := range kctxs {
		if kctx.Err() != nil {
			t.Fatalf("the KeepAlive of %s ended: %v", locks[i].Key(), context.Cause(kctx))
		}
	}
	p.del(t, locks[0].Key())
	select {
	case <-kctxs[0].Done():
		wantErr(t, context.Cause(kctxs[0]), padlock.ErrLost, "the cause of a KeepAlive whose lock was deleted")
	case <-time.After(5 * time.Second):
		t.Fatal("the KeepAlive of a lock deleted on every node goes on after 5s")
	}
	for i, kctx := range kctxs[1:] {
		if kctx.Err() != nil {
			t.Errorf("the KeepAlive of %s ended: %v", locks[i+1].Key(), context.Cause(kctx))
		}
		must(t, locks[i+1].Release(ctx), "Release")
	}
}

// redlockResumeBreak: Resume picks up a Redlock's lock by its token in
// another Client; Break ends one on every node.
func redlockResumeBreak(t *testing.T, p *part) {
	ctx := bounded(t)
	cs := p.clients(t, 2)
	k := key(t)
	l, err := cs[0].TryAcquire(ctx, k, 30*time.Second, padlock.WithMetadata("job"))
	must(t, err, "TryAcquire")
	r, err := cs[1].Resume(ctx, k, l.Token())
	must(t, err, "Resume")
	if r.Metadata() != "job" {
		t.Errorf("Resume: metadata %q, want job", r.Metadata())
	}
	must(t, r.Extend(ctx, time.Minute), "Extend of the resumed lock")
	must(t, r.Release(ctx), "Release of the resumed lock")
	wantErr(t, l.Release(ctx), padlock.ErrNotHeld, "Release of the original")
	l, err = cs[0].TryAcquire(ctx, k, 30*time.Second)
	must(t, err, "TryAcquire")
	info, err := cs[1].Break(ctx, k)
	must(t, err, "Break")
	if !info.Held || info.Token != l.Token() {
		t.Errorf("Break reports %+v, want the holder %s", info, l.Token())
	}
	wantErr(t, l.Extend(ctx, time.Minute), padlock.ErrNotHeld, "Extend of a broken lock")
	l, err = cs[1].TryAcquire(ctx, k, time.Minute)
	must(t, err, "TryAcquire after Break")
	must(t, l.Release(ctx), "Release")
}

// redlockMinorityDown: with one node of three down, a Client made before
// takes, keeps alive and hands off locks on the other two, and its calls
// do not wait for the one down.
func redlockMinorityDown(t *testing.T, p *part) {
	ctx := bounded(t)
	cs := p.clients(t, 2)
	k := key(t)
	l, err := cs[0].TryAcquire(ctx, k, waitTTL)
	must(t, err, "TryAcquire")
	must(t, l.Release(ctx), "Release")
	p.nodes[2].Stop()
	l, err = cs[0].TryAcquire(ctx, k, waitTTL)
	must(t, err, "TryAcquire with a node down")
	_, err = cs[1].TryAcquire(ctx, k, time.Minute)
	wantErr(t, err, padlock.ErrNotAcquired, "TryAcquire of a held lock with a node down")
	kept, err := cs[0].TryAcquire(ctx, k+":kept", 300*time.Millisecond)
	must(t, err, "TryAcquire with a node down")
	kctx, stop := kept.KeepAlive(ctx)
	defer stop()
	time.Sleep(time.Second)
	if kctx.Err() != nil {
		t.Fatalf("KeepAlive with a node down: %v", context.Cause(kctx))
	}
	must(t, kept.Release(ctx), "Release with a node down")
	got, _ := waitLater(t, ctx, cs[1], k, waitTTL)
	released := time.Now()
	must(t, l.Release(ctx), "Release with a node down")
	w := receive(t, got, "the waiter")
	must(t, w.err, "the waiter with a node down")
	if took := w.at.Sub(released); took > promptly {
		t.Errorf("the waiter was served %v after the release, want within %v", took.Round(time.Millisecond), promptly)
	}
	must(t, w.l.Release(ctx), "Release")
}
