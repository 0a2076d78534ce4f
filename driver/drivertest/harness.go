package drivertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/redistest"
)

// A part is one deployment the checks run on, shared by them: the driver
// under test, what it connects to, and go-redis clients of the servers to
// look at and change keys behind padlock's back.
type part struct {
	setup    Setup
	dep      Deployment
	deps     []Deployment             // a Redlock's nodes; nil for another deployment
	srv      *servers                 // starts more servers
	nodes    []*redistest.Server      // a Cluster's masters; the Sentinel's primary and replica; a Redlock's nodes
	sentinel *redistest.Server        // the Sentinel
	admin    redis.UniversalClient    // a go-redis client of the deployment, as padlock's would be
	raw      map[string]*redis.Client // a go-redis client of every server that holds keys, by address
}

// newPart returns the part of dep, whose keys are on data. admin is
// closed when t ends.
func newPart(t *testing.T, s Setup, dep Deployment, admin redis.UniversalClient, data ...*redistest.Server) *part {
	t.Cleanup(func() { _ = admin.Close() })
	p := &part{setup: s, dep: dep, admin: admin, raw: map[string]*redis.Client{}}
	for _, srv := range data {
		p.raw[srv.Addr()] = srv.Client()
	}
	return p
}

// A check is one behaviour the suite checks, on the part it is given.
type check struct {
	name string
	run  func(t *testing.T, p *part)
}

// runAll runs each of checks as a parallel subtest of t, on p.
func (p *part) runAll(t *testing.T, checks []check) {
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, p)
		})
	}
}

// client returns a new Client of the driver under test on p's
// deployment, closed when t ends.
func (p *part) client(t testing.TB, opts ...padlock.Option) *padlock.Client {
	t.Helper()
	var c *padlock.Client
	if p.deps != nil {
		deps := make([]Deployment, len(p.deps))
		for i, dep := range p.deps {
			deps[i] = dep.clone()
		}
		c = p.setup.NewRedlock(t, deps, opts...)
	} else {
		c = p.setup.New(t, p.dep.clone(), opts...)
	}
	if c == nil {
		t.Fatalf("drivertest: Setup.New returned nil for %+v", p.dep)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// clone returns a copy of dep with Addrs of its own: a client may keep
// the slice it is given, and append to it (go-redis's ClusterClient
// appends the nodes it finds to its ClusterOptions.Addrs).
func (dep Deployment) clone() Deployment {
	dep.Addrs = slices.Clone(dep.Addrs)
	return dep
}

// clients returns n Clients as client does.
func (p *part) clients(t testing.TB, n int, opts ...padlock.Option) []*padlock.Client {
	t.Helper()
	cs := make([]*padlock.Client, n)
	for i := range cs {
		cs[i] = p.client(t, opts...)
	}
	return cs
}

// flushScripts runs SCRIPT FLUSH on every server of p: the next EVALSHA
// of each script answers NOSCRIPT.
func (p *part) flushScripts(t testing.TB) {
	t.Helper()
	for addr, rdb := range p.raw {
		must(t, rdb.ScriptFlush(context.Background()).Err(), "SCRIPT FLUSH on %s", addr)
	}
}

// del deletes keys behind padlock's back, as an operator would: on every
// node of a Redlock.
func (p *part) del(t testing.TB, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if p.deps == nil {
			must(t, p.admin.Del(context.Background(), k).Err(), "DEL %s", k)
			continue
		}
		for addr, rdb := range p.raw {
			must(t, rdb.Del(context.Background(), k).Err(), "DEL %s on %s", k, addr)
		}
	}
}

// key returns a lock key of t's own.
func key(t testing.TB) string {
	return "lock:drivertest:" + strings.NewReplacer("{", "(", "}", ")", " ", "_").Replace(t.Name())
}

// bounded returns t's context, ended after a minute at most: no check
// waits longer, and no goroutine of a check outlives it.
func bounded(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// promptly is how soon after a release a waiter of another Client is
// served by the release's pub/sub message: far longer than a hand-off
// takes, and far shorter than the ticket renewal (every 2.5s for a ttl of
// 5s or more) that serves it without pub/sub.
const promptly = time.Second

// waitTTL is the ttl of the locks that waiters wait for: long enough that
// only a release, never an expiry, ends a wait.
const waitTTL = 10 * time.Second

// neverPoll is a backoff so long that only a release's message (or a
// ticket's renewal) can serve a waiter within a check.
var neverPoll = padlock.WithBackoff(padlock.ExponentialBackoff(time.Hour, time.Hour))

// waited is what a call that waits returned, and when.
type waited struct {
	l   *padlock.Lock
	err error
	at  time.Time
}

// later runs acquire in a goroutine and returns its result.
func later(acquire func() (*padlock.Lock, error)) <-chan waited {
	ch := make(chan waited, 1)
	go func() {
		l, err := acquire()
		ch <- waited{l, err, time.Now()}
	}()
	return ch
}

// acquireLater runs c.Acquire in a goroutine and returns its result.
func acquireLater(ctx context.Context, c *padlock.Client, key string, ttl time.Duration, opts ...padlock.Option) <-chan waited {
	return later(func() (*padlock.Lock, error) { return c.Acquire(ctx, key, ttl, opts...) })
}

// waitLater runs c.Acquire of key in a goroutine, with neverPoll, and
// returns once it waits: it found the lock held, queued its ticket in
// Redis (but on a Redlock), and listens on pub/sub (Observer.WaitStart
// comes after its subscription is confirmed). It returns the Acquire's
// result, and the count of the hand-offs it hears of by message.
func waitLater(t testing.TB, ctx context.Context, c *padlock.Client, key string, ttl time.Duration, opts ...padlock.Option) (<-chan waited, *handOffs) {
	t.Helper()
	h := &handOffs{}
	started := make(chan struct{}, 1)
	waiting := padlock.WithObserver(&padlock.Observer{WaitStart: func(context.Context, string) { started <- struct{}{} }})
	ch := acquireLater(ctx, c, key, ttl, append([]padlock.Option{neverPoll, h.option(), waiting}, opts...)...)
	select {
	case <-started:
	case w := <-ch:
		t.Fatalf("Acquire of %s returned (%v) while the lock is held", key, w.err)
	case <-time.After(10 * time.Second):
		t.Fatalf("Acquire of %s does not wait after 10s", key)
	}
	return ch, h
}

// receive returns what ch gives within 20s, and fails t if nothing comes.
func receive(t testing.TB, ch <-chan waited, what string) waited {
	t.Helper()
	select {
	case w := <-ch:
		return w
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: no result after 20s", what)
		return waited{}
	}
}

// served returns the Lock that ch gives, and fails t if the call failed.
func served(t testing.TB, ch <-chan waited, what string) *padlock.Lock {
	t.Helper()
	w := receive(t, ch, what)
	must(t, w.err, "%s", what)
	return w.l
}

// notYet fails t if ch has given a result: the call still waits.
func notYet(t testing.TB, ch <-chan waited, what string) {
	t.Helper()
	select {
	case w := <-ch:
		t.Fatalf("%s: returned (%v) while it should wait", what, w.err)
	default:
	}
}

// waitQueued waits until n clients wait in Redis for key, as c's Inspect
// sees it.
func waitQueued(t testing.TB, c *padlock.Client, key string, n int) {
	t.Helper()
	var last padlock.LockInfo
	var err error
	if !eventually(10*time.Second, func() bool {
		last, err = c.Inspect(context.Background(), key)
		return err == nil && last.Waiting == n
	}) {
		t.Fatalf("%d waiters of %s not queued within 10s (last seen: %d, %v)", n, key, last.Waiting, err)
	}
}

// handOffs counts the hand-offs to the waiters of the calls given its
// option: a grant that a release's reply or a pub/sub message named
// (Observer.HandOff), not one that a waiter found by looking at Redis.
type handOffs struct{ n atomic.Int32 }

func (h *handOffs) option() padlock.Option {
	return padlock.WithObserver(&padlock.Observer{HandOff: func(string) { h.n.Add(1) }})
}

// promptHandOff fails t unless w, a waiter of another Client than the
// releaser's, was served, by the release's pub/sub message (h counted
// it), within promptly of released.
func promptHandOff(t testing.TB, w waited, h *handOffs, released time.Time, what string) {
	t.Helper()
	must(t, w.err, "%s", what)
	if n := h.n.Swap(0); n != 1 {
		t.Errorf("%s: %d hand-offs by message (Observer.HandOff), want 1: the grant was found by a ticket's renewal, not heard on pub/sub", what, n)
	}
	if took := w.at.Sub(released); took > promptly {
		t.Errorf("%s: served %v after the release, want within %v", what, took.Round(time.Millisecond), promptly)
	}
}

// must fails t if err is not nil.
func must(t testing.TB, err error, format string, args ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", fmt.Sprintf(format, args...), err)
	}
}

// wantErr fails t unless err matches target.
func wantErr(t testing.TB, err, target error, format string, args ...any) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got %v, want an error matching %q", fmt.Sprintf(format, args...), err, target)
	}
}

// eventually waits, polling every 10ms, until cond holds, and reports
// whether it did within limit.
func eventually(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}
