package drivertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/driver"
	"github.com/padlock-go/padlock/internal/faultproxy"
)

// boundChecks run on one server, through a proxy of their own.
var boundChecks = []check{
	{"SlowServer", slowServer},
	{"SilentServer", silentServer},
	{"ShortDeadlines", shortDeadlines},
}

// callBound is how late past its context's deadline a call may return,
// whatever Redis does: the time to notice the deadline and return, and a
// leave or an undo that Redis answers at once or goes on in the
// background.
const callBound = 100 * time.Millisecond

// callTimeout is the deadline of the calls that the bound checks time.
const callTimeout = 500 * time.Millisecond

// proxied returns a Client of the driver under test on p's one server
// through a fault proxy, warmed up (its scripts loaded, its connections
// made) so that the proxy's faults meet calls, not the client's start.
func proxied(t *testing.T, p *part) (*padlock.Client, *faultproxy.Proxy) {
	t.Helper()
	px, err := faultproxy.Start(p.nodes[0].Addr())
	must(t, err, "starting the proxy")
	t.Cleanup(px.Close)
	c := p.setup.New(t, Deployment{Kind: driver.Single, Addrs: []string{px.Addr()}})
	if c == nil {
		t.Fatal("drivertest: Setup.New returned nil")
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := bounded(t)
	k := key(t) + ":warm"
	for _, opts := range [][]padlock.Option{nil, {padlock.WithLimit(2)}} {
		l, err := c.Acquire(ctx, k, time.Second, opts...)
		must(t, err, "warming up")
		must(t, l.Release(ctx), "warming up")
	}
	return c, px
}

// timed runs f with a context that ends after callTimeout, and fails t
// if f returns nil or later than callBound past that deadline.
func timed(t *testing.T, what string, f func(ctx context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(bounded(t), callTimeout)
	defer cancel()
	start := time.Now()
	err := f(ctx)
	took := time.Since(start)
	if err == nil {
		t.Errorf("%s: nil error, though Redis did not answer in time", what)
	}
	if took > callTimeout+callBound {
		t.Errorf("%s with a %v deadline returned after %v (%v), more than %v past it", what, callTimeout, took.Round(time.Millisecond), err, callBound)
	}
	return err
}

// slowServer: with a server that answers each command 2s late, TryAcquire
// and Acquire return by their deadline, a call beside them with an ample
// deadline is not ended by theirs, and once Redis has answered what they
// sent, nothing is left held and no ticket is left queued.
func slowServer(t *testing.T, p *part) {
	c, px := proxied(t, p)
	holder := p.client(t)
	ctx := bounded(t)
	k := key(t)
	held, err := holder.TryAcquire(ctx, k+":held", time.Minute)
	must(t, err, "TryAcquire of the held key")
	px.SetLatency(time.Second) // each way: a reply comes 2s after its command

	// A call with an ample deadline, beside the timed ones on the same
	// connections: their deadlines do not end it.
	ample := later(func() (*padlock.Lock, error) {
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		return c.TryAcquire(actx, k+":ample", time.Minute)
	})
	err = timed(t, "TryAcquire", func(ctx context.Context) error {
		_, err := c.TryAcquire(ctx, k, time.Minute)
		return err
	})
	wantErr(t, err, context.DeadlineExceeded, "TryAcquire on a slow server")
	err = timed(t, "Acquire of a held key", func(ctx context.Context) error {
		_, err := c.Acquire(ctx, k+":held", time.Minute)
		return err
	})
	wantErr(t, err, context.DeadlineExceeded, "Acquire on a slow server")
	err = timed(t, "Acquire of a semaphore", func(ctx context.Context) error {
		_, err := c.Acquire(ctx, k+":sem", time.Minute, padlock.WithLimit(2))
		return err
	})
	wantErr(t, err, context.DeadlineExceeded, "Acquire of a semaphore on a slow server")

	if w := receive(t, ample, "the TryAcquire with an ample deadline"); w.err != nil {
		t.Errorf("a TryAcquire with a 20s deadline, beside calls of 500ms: %v", w.err)
	} else {
		must(t, w.l.Release(ctx), "Release")
	}

	// What they sent runs 1s after it was sent; the undo and the leave
	// come after it, and run 2s after that reply.
	settled := func() bool {
		info, err := holder.Inspect(ctx, k)
		if err != nil || info.Held {
			return false
		}
		if info, err = holder.Inspect(ctx, k+":held"); err != nil || info.Waiting != 0 {
			return false
		}
		info, err = holder.Inspect(ctx, k+":sem")
		return err == nil && !info.Held && info.Waiting == 0
	}
	if !eventually(20*time.Second, settled) {
		for _, key := range []string{k, k + ":held", k + ":sem"} {
			info, err := holder.Inspect(ctx, key)
			t.Errorf("left behind once Redis answered: %s: %+v, %v", key, info, err)
		}
	}
	info, err := holder.Inspect(ctx, k+":held")
	if err != nil || info.Token != held.Token() {
		t.Errorf("the held key: %+v, %v; want its holder's alone", info, err)
	}
	must(t, held.Release(ctx), "Release of the held key")
}

// silentServer: with a server that takes every command and answers none,
// TryAcquire and Acquire return by their deadline, and a Release whose
// context has ended returns within 2s.
func silentServer(t *testing.T, p *part) {
	c, px := proxied(t, p)
	ctx := bounded(t)
	k := key(t)
	l, err := c.TryAcquire(ctx, k+":mine", time.Minute)
	must(t, err, "TryAcquire")
	px.SetBlackhole(true)
	timed(t, "TryAcquire", func(ctx context.Context) error {
		_, err := c.TryAcquire(ctx, k, time.Minute)
		return err
	})
	timed(t, "Acquire", func(ctx context.Context) error {
		_, err := c.Acquire(ctx, k, time.Minute)
		return err
	})
	timed(t, "Extend", func(ctx context.Context) error { return l.Extend(ctx, time.Minute) })
	ended, cancel := context.WithCancel(ctx)
	cancel()
	start := time.Now()
	err = l.Release(ended)
	// Its round trip's own 2s bound, and room to notice it on a loaded
	// machine (CI's Go 1.27 run took 2.106s).
	if took := time.Since(start); err == nil || took > 2*time.Second+2*callBound {
		t.Errorf("Release with an ended context on a silent server: %v after %v; want an error within 2s", err, took.Round(time.Millisecond))
	}
}

// shortDeadlines: 256 goroutines take and release locks of every kind
// with deadlines of 0 to 2ms, as a loaded service's callers might, beside
// callers with ample deadlines. No call of an ample deadline fails, no Release reports its
// context's error (Redis answers: it ignores the cancellation), and once
// all are done no key is held by nobody.
func shortDeadlines(t *testing.T, p *part) {
	c, _ := proxied(t, p)
	ctx := bounded(t)
	k := key(t)
	keys := make([]string, 16)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s:%d", k, i)
	}
	const goroutines, rounds = 256, 20
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			errs <- cycles(ctx, c, keys, g%8 == 0, rounds)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	// Undos still in flight land within a round trip or two.
	if !eventually(5*time.Second, func() bool {
		for _, key := range keys {
			if info, err := c.Inspect(ctx, key); err != nil || info.Held {
				return false
			}
		}
		return true
	}) {
		for _, key := range keys {
			info, err := c.Inspect(ctx, key)
			t.Errorf("held by nobody: %s: %+v, %v", key, info, err)
		}
	}
}

// kinds are the kinds of lock that shortDeadlines takes, one per key in
// turn: a lock, a semaphore of 2, a shared hold, a fenced lock.
var kinds = [][]padlock.Option{nil, {padlock.WithLimit(2)}, {padlock.WithShared()}, {padlock.WithFencing()}}

// cycles makes rounds TryAcquire and Release cycles on keys, with
// deadlines of 0-2ms (ample: 10s), and returns the first error that breaks
// a promise.
func cycles(ctx context.Context, c *padlock.Client, keys []string, ample bool, rounds int) error {
	deadline := func() time.Duration {
		if ample {
			return 10 * time.Second
		}
		return time.Duration(rand.Int64N(int64(2 * time.Millisecond)))
	}
	for range rounds {
		i := rand.IntN(len(keys))
		k := keys[i]
		actx, cancel := context.WithTimeout(ctx, deadline())
		l, err := c.TryAcquire(actx, k, 10*time.Second, kinds[i%len(kinds)]...)
		cancel()
		switch {
		case errors.Is(err, padlock.ErrNotAcquired):
			continue
		case err != nil && (ample || !errors.Is(err, context.DeadlineExceeded)):
			return fmt.Errorf("acquire of %s: %w", k, err)
		case err != nil:
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, deadline())
		err = l.Release(rctx)
		cancel()
		if err != nil {
			return fmt.Errorf("release of %s, which Redis answers: %w", k, err)
		}
	}
	return nil
}
