package padlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/faultproxy"
	"github.com/padlock-go/padlock/internal/redistest"
)

// redlockEnv is five independent redis-servers and a Redlock over them.
type redlockEnv struct {
	srvs    []*redistest.Server
	raws    []*redis.Client
	clients []redis.UniversalClient // e.c's
	c       *padlock.Client
}

func startRedlock(t testing.TB, n int, opts ...padlock.Option) *redlockEnv {
	t.Helper()
	e := &redlockEnv{}
	var clients []redis.UniversalClient
	for range n {
		s := redistest.Start(t)
		e.srvs = append(e.srvs, s)
		e.raws = append(e.raws, s.Client())
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		clients = append(clients, rdb)
	}
	e.clients = clients
	e.c = padlock.NewRedlock(clients, opts...)
	t.Cleanup(func() { _ = e.c.Close() })
	return e
}

func (e *redlockEnv) values(key string) []string {
	var out []string
	for _, r := range e.raws {
		out = append(out, r.Get(context.Background(), key).Val())
	}
	return out
}

// For every subset of the five nodes already taken by someone else, the
// lock is acquired if and only if a majority is free; a failed attempt
// leaves nothing behind and another holder's keys are never touched.
func TestRedlockQuorumOverEverySubset(t *testing.T) {
	t.Parallel() // starts servers of its own; mostly waits
	e := startRedlock(t, 5)
	ctx := t.Context()
	for taken := range 1 << 5 {
		key := fmt.Sprintf("lock:redlock:%05b", taken)
		for i, r := range e.raws {
			if taken&(1<<i) != 0 {
				require.NoError(t, r.Set(ctx, key, "other", time.Minute).Err())
			}
		}
		free := 5 - bits.OnesCount(uint(taken))
		l, err := e.c.TryAcquire(ctx, key, time.Minute)
		if free >= 3 {
			require.NoError(t, err, "%05b: %d free nodes make a quorum", taken, free)
			require.NoError(t, l.Release(ctx))
		} else {
			require.ErrorIs(t, err, padlock.ErrNotAcquired, "%05b: %d free nodes", taken, free)
		}
		// A node that answers after the outcome is decided (here, under
		// load) is cleaned up after it answers: soon, not at once.
		want := make([]string, 5)
		for i := range want {
			if taken&(1<<i) != 0 {
				want[i] = "other" // another holder's key is never touched
			}
		}
		require.Eventually(t, func() bool { return slices.Equal(e.values(key), want) }, 2*time.Second, 5*time.Millisecond,
			"%05b: the other holders' keys untouched, the rest left clean: %q", taken, e.values(key))
	}
}

// A node whose acquire is sent after the attempt has failed without it,
// or after the lock was released (a slow goroutine, a slow network), is
// cleaned up after that acquire lands there, not before: a release that
// overtook it would leave the key held on that node until its ttl. Here
// the caller's context ends as its call returns, as with a deferred
// cancel.
func TestRedlockLateNodeIsUndoneAfterItLands(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		taken []int // nodes another holder has
		want  []string
	}{
		{"failed attempt", []int{1, 2, 3}, []string{"", "other", "other", "other", ""}},
		{"released at once", nil, []string{"", "", "", "", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // starts servers of its own; mostly waits
			e := startRedlock(t, 5)
			c := e.c
			// Armed once the warm-up has landed on every node.
			late := &lateFirstScript{delay: 300 * time.Millisecond, landed: make(chan struct{})}
			e.clients[0].AddHook(late)
			// The scripts are loaded on every node: the late acquire takes
			// the key, with no NOSCRIPT and second call.
			warm, err := c.TryAcquire(t.Context(), "lock:warm", time.Minute)
			require.NoError(t, err)
			require.NoError(t, warm.Release(t.Context()))
			require.Eventually(t, func() bool { return slices.Equal(e.values("lock:warm"), make([]string, 5)) }, 2*time.Second, 5*time.Millisecond,
				"the warm-up released on every node: %q", e.values("lock:warm"))
			late.armed.Store(true)
			for _, i := range tc.taken {
				require.NoError(t, e.raws[i].Set(t.Context(), "lock:late", "other", time.Minute).Err())
			}
			ctx, cancel := context.WithCancel(t.Context())
			l, err := c.TryAcquire(ctx, "lock:late", time.Minute)
			if tc.taken != nil {
				require.ErrorIs(t, err, padlock.ErrNotAcquired)
			} else {
				require.NoError(t, err)
				require.NoError(t, l.Release(ctx))
			}
			cancel()
			select {
			case <-late.landed:
			case <-time.After(5 * time.Second):
				t.Fatal("the late acquire never landed on node 0")
			}
			require.Eventually(t, func() bool { return slices.Equal(e.values("lock:late"), tc.want) }, 2*time.Second, 5*time.Millisecond,
				"node 0 left clean: %q", e.values("lock:late"))
		})
	}
}

// Killing one, then two of five nodes during a lease keeps it (a quorum of
// three remains); killing a third loses it.
func TestRedlockSurvivesAMinority(t *testing.T) {
	longOnly(t)
	t.Parallel() // starts servers of its own; mostly waits
	e := startRedlock(t, 5)
	ctx := t.Context()
	const ttl = 600 * time.Millisecond
	l, err := e.c.TryAcquire(ctx, "lock:redlock:lease", ttl)
	require.NoError(t, err)
	kctx, stop := l.KeepAlive(ctx)
	defer stop()
	for i := range 2 {
		e.srvs[i].Kill()
		time.Sleep(3 * ttl)
		require.NoError(t, kctx.Err(), "with %d nodes down: %v", i+1, context.Cause(kctx))
		_, err := l.TTL(ctx)
		require.NoError(t, err)
	}
	_, err = e.c.TryAcquire(ctx, "lock:redlock:lease", ttl)
	require.ErrorIs(t, err, padlock.ErrNotAcquired, "still held on a quorum")
	e.srvs[2].Kill()
	waitDone(t, kctx, 5*time.Second)
	require.ErrorIs(t, context.Cause(kctx), padlock.ErrLost)
}

// A node restarted empty forgets the lock; the other four still hold it,
// and Extend, TTL and Release succeed on that quorum.
func TestRedlockNodeRestartedEmpty(t *testing.T) {
	t.Parallel() // starts servers of its own; mostly waits
	e := startRedlock(t, 5)
	ctx := t.Context()
	l, err := e.c.TryAcquire(ctx, "lock:redlock:restart", time.Minute)
	require.NoError(t, err)
	e.srvs[0].Restart()
	assert.Empty(t, e.raws[0].Get(ctx, "lock:redlock:restart").Val())
	require.NoError(t, l.Extend(ctx, time.Minute))
	d, err := l.TTL(ctx)
	require.NoError(t, err)
	assert.Greater(t, d, 50*time.Second)
	require.NoError(t, l.Release(ctx))
	// Release returns once a quorum answered; the other nodes' releases
	// land after it (a loaded run saw node 4's still in flight).
	assert.Eventually(t, func() bool {
		for _, v := range e.values("lock:redlock:restart") {
			if v != "" {
				return false
			}
		}
		return true
	}, 2*time.Second, 5*time.Millisecond, "released on every node: %q", e.values("lock:redlock:restart"))
}

func TestRedlockWaitersAreWokenAndFencingIsRefused(t *testing.T) {
	t.Parallel()
	e := startRedlock(t, 3)
	ctx := t.Context()
	holder, err := e.c.TryAcquire(ctx, "lock:redlock:wait", time.Hour)
	require.NoError(t, err)
	time.AfterFunc(100*time.Millisecond, func() { _ = holder.Release(context.Background()) })
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l, err := e.c.Acquire(wctx, "lock:redlock:wait", time.Minute, neverPoll)
	require.NoError(t, err, "woken by a release notification")
	require.NoError(t, l.Release(ctx))

	_, err = e.c.TryAcquire(ctx, "lock:redlock:fenced", time.Minute, padlock.WithFencing())
	require.ErrorIs(t, err, padlock.ErrInvalid)
	assert.Contains(t, err.Error(), "no fence")
	_, err = padlock.NewRedlock(nil).TryAcquire(ctx, "k", time.Minute)
	require.ErrorIs(t, err, padlock.ErrInvalid)
}

// Redlock renewals go to every node at once and are done at a majority:
// with one, then two, of five nodes blackholed (connections open, no
// replies), twenty kept-alive locks are not lost; with a third, every one
// ends with ErrLost by its local deadline.
func TestRedlockRenewalsDoNotWaitForASlowNode(t *testing.T) {
	longOnly(t)
	t.Parallel()
	clients, _, proxies := proxiedNodes(t, 5, 5)
	c := padlock.NewRedlock(clients)
	ctx := t.Context()
	const ttl = 3 * time.Second
	phase := 4 * time.Second
	if longRun() {
		phase = 10 * time.Second
	}
	var locks []*padlock.Lock
	var kctxs []context.Context
	for i := range 20 {
		l, err := c.TryAcquire(ctx, fmt.Sprintf("lock:redlock:slow:%d", i), ttl)
		require.NoError(t, err)
		kctx, stop := l.KeepAlive(ctx)
		defer stop()
		locks, kctxs = append(locks, l), append(kctxs, kctx)
	}
	for i := range 2 {
		proxies[i].SetBlackhole(true)
		time.Sleep(phase)
		for j, kctx := range kctxs {
			require.NoError(t, kctx.Err(), "lock %d with %d nodes blackholed: %v", j, i+1, context.Cause(kctx))
		}
	}
	type end struct{ at, deadline time.Time }
	ends := make([]chan end, len(kctxs))
	for j, kctx := range kctxs {
		ends[j] = make(chan end, 1)
		context.AfterFunc(kctx, func() { ends[j] <- end{time.Now(), locks[j].Deadline()} })
	}
	proxies[2].SetBlackhole(true)
	for j, kctx := range kctxs {
		waitDone(t, kctx, ttl+time.Second)
		require.ErrorIs(t, context.Cause(kctx), padlock.ErrLost, "lock %d", j)
		e := <-ends[j]
		assert.WithinDuration(t, e.deadline, e.at, 300*time.Millisecond, "lock %d ended by its local deadline", j)
	}
	for _, p := range proxies {
		p.SetBlackhole(false)
	}
	require.NoError(t, c.Close())
}

// A kept-alive Redlock lock keeps its majority across successive empty
// restarts of a minority: each renewal sets it again on a node that lost
// it. Another Client cannot take it meanwhile.
func TestRedlockReestablishesTheLockOnARestartedNode(t *testing.T) {
	t.Parallel()
	e := startRedlock(t, 5)
	other := startRedlockOver(t, e)
	ctx := t.Context()
	// 3s: a node gets a tenth of it to answer, and CI's FIPS run (every
	// script as EVAL) once took longer than 100ms on all five.
	const ttl = 3 * time.Second
	l, err := e.c.TryAcquire(ctx, "lock:redlock:again", ttl)
	require.NoError(t, err)
	kctx, stop := l.KeepAlive(ctx)
	defer stop()
	for i := range 3 {
		e.srvs[i].Restart()
		time.Sleep(2 * ttl / 3) // two renewals
		_, err := other.TryAcquire(ctx, "lock:redlock:again", ttl)
		require.ErrorIs(t, err, padlock.ErrNotAcquired, "after node %d restarted empty", i)
		held := 0
		for _, v := range e.values("lock:redlock:again") {
			if unspanned(v) == l.Token() {
				held++
			}
		}
		assert.GreaterOrEqual(t, held, 3, "held on a majority after node %d restarted", i)
		require.NoError(t, kctx.Err())
	}
	require.NoError(t, l.Release(ctx))
}

// startRedlockOver is another Redlock Client over e's nodes.
func startRedlockOver(t *testing.T, e *redlockEnv) *padlock.Client {
	var clients []redis.UniversalClient
	for _, s := range e.srvs {
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		clients = append(clients, rdb)
	}
	c := padlock.NewRedlock(clients)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// A chosen token's Redlock acquire that fails while its takes on a
// minority are still on their way (the majority held elsewhere answered
// first) undoes them once they land: with that majority held elsewhere,
// the token holds no quorum anywhere, so none of them is an earlier take
// worth keeping.
func TestRedlockChosenTokenUndoesALateMinority(t *testing.T) {
	t.Parallel() // starts servers of its own
	nodes, raws, proxies := proxiedNodes(t, 4, 2)
	ctx := t.Context()
	const key = "lock:redlock:late-minority"
	for _, r := range raws[2:] {
		require.NoError(t, r.Set(ctx, key, "other", time.Minute).Err())
	}
	for _, p := range proxies {
		p.SetLatency(100 * time.Millisecond) // each way
	}
	rl := padlock.NewRedlock(nodes)
	defer rl.Close()
	_, err := rl.TryAcquire(ctx, key, time.Minute, padlock.WithToken("job-b"))
	require.ErrorIs(t, err, padlock.ErrNotAcquired)
	landed := make([]bool, 2) // the takes land after the acquire returned
	for start := time.Now(); slices.Contains(landed, false) && time.Since(start) < 2*time.Second; time.Sleep(time.Millisecond) {
		for i, r := range raws[:2] {
			landed[i] = landed[i] || unspanned(r.Get(ctx, key).Val()) == "job-b"
		}
	}
	require.Equal(t, []bool{true, true}, landed, "the minority's takes landed")
	for i, r := range raws[:2] {
		assert.Eventually(t, func() bool { return errors.Is(r.Get(ctx, key).Err(), redis.Nil) },
			3*time.Second, 10*time.Millisecond, "node %d keeps nothing of the failed acquire", i)
	}
}

// A chosen token's multi-key Redlock acquire that a majority refuses (one
// of its keys is held elsewhere there), with a node that does not answer,
// leaves alone what the token held already: its earlier lock of another
// of the keys, on every node, stays.
func TestRedlockChosenTokenManyKeepsItsEarlierLock(t *testing.T) {
	t.Parallel() // starts servers of its own
	nodes, raws, proxies := proxiedNodes(t, 3, 1)
	ctx := t.Context()
	a, b := "lock:{job}:a", "lock:{job}:b"
	rl := padlock.NewRedlock(nodes)
	defer rl.Close()
	held, err := rl.TryAcquire(ctx, a, time.Minute, padlock.WithToken("job-t"))
	require.NoError(t, err)
	for _, r := range raws[1:] {
		require.NoError(t, r.Set(ctx, b, "other", time.Minute).Err())
	}
	proxies[0].SetBlackhole(true)
	_, err = rl.TryAcquireMany(ctx, []string{a, b}, time.Minute, padlock.WithToken("job-t"))
	require.ErrorIs(t, err, padlock.ErrNotAcquired)
	time.Sleep(200 * time.Millisecond) // an undo would have run on the nodes that answered
	for i, r := range raws[1:] {
		assert.True(t, strings.HasPrefix(r.Get(ctx, a).Val(), "job-t"), "node %d: the token's earlier lock of %s", i+1, a)
	}
	proxies[0].SetBlackhole(false)
	proxies[0].CutAll()
	require.NoError(t, held.Release(ctx))
}

// proxiedNodes starts n redis-servers for a Redlock, the first proxied of
// them behind a fault proxy each, and returns go-redis clients for them
// (through the proxies), clients straight to the servers, and the proxies.
func proxiedNodes(t *testing.T, n, proxied int) (clients []redis.UniversalClient, raws []*redis.Client, proxies []*faultproxy.Proxy) {
	t.Helper()
	for i := range n {
		s := redistest.Start(t)
		raws = append(raws, s.Client())
		addr := s.Addr()
		if i < proxied {
			p, err := faultproxy.Start(s.Addr())
			require.NoError(t, err)
			t.Cleanup(p.Close)
			proxies, addr = append(proxies, p), p.Addr()
		}
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = rdb.Close() })
		clients = append(clients, rdb)
	}
	return clients, raws, proxies
}

// Resume and Break on a Redlock: a lock is resumed where its token holds a
// quorum (also with a node down), and broken on every node; a waiter of
// another Client is woken by the break.
func TestRedlockResumeAndBreak(t *testing.T) {
	t.Parallel() // starts servers of its own; mostly waits
	e := startRedlock(t, 3)
	ctx := t.Context()
	const key = "lock:redlock:resume"
	l, err := e.c.TryAcquire(ctx, key, 10*time.Second, padlock.WithToken("deploy-7"), padlock.WithMetadata("pipeline"))
	require.NoError(t, err)
	require.NoError(t, e.raws[2].Set(ctx, key, "other", time.Minute).Err()) // one node lost it to someone else

	var clients []redis.UniversalClient
	for _, s := range e.srvs {
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		clients = append(clients, rdb)
	}
	other := padlock.NewRedlock(clients)
	defer other.Close()
	r, err := other.Resume(ctx, key, "deploy-7")
	require.NoError(t, err, "held on two of three")
	assert.Equal(t, "pipeline", r.Metadata())
	left := min(e.raws[0].PTTL(ctx, key).Val(), e.raws[1].PTTL(ctx, key).Val()) // the two that hold it
	assert.False(t, r.Deadline().After(time.Now().Add(left+time.Millisecond)), "never later than the expiry on the quorum")
	require.NoError(t, r.Extend(ctx, 20*time.Second))
	assert.Greater(t, e.raws[0].PTTL(ctx, key).Val(), 15*time.Second)
	_, err = other.Resume(ctx, key, "deploy-8")
	require.ErrorIs(t, err, padlock.ErrNotHeld)
	require.NoError(t, e.raws[1].Del(ctx, key).Err())
	_, err = other.Resume(ctx, key, "deploy-7")
	require.ErrorIs(t, err, padlock.ErrNotHeld, "on one node only: no quorum")
	require.NoError(t, e.raws[1].Set(ctx, key, "deploy-7 pipeline", time.Minute).Err())

	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		w, err := other.Acquire(wctx, key, time.Second, padlock.WithBackoff(padlock.ExponentialBackoff(time.Hour, time.Hour)))
		if err == nil {
			err = w.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(300 * time.Millisecond) // it waits, subscribed
	info, err := e.c.Break(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, "deploy-7", info.Token)
	select {
	case err := <-got:
		require.NoError(t, err, "the waiter took the broken lock")
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not woken by the break")
	}
	require.ErrorIs(t, l.Release(ctx), padlock.ErrNotHeld)
}

// A Redlock acquire with a chosen token that took fewer nodes than a
// quorum, every node answering, releases what it took, as any acquire
// does: had the token held a quorum, it would have the lock.
func TestRedlockChosenTokenReleasesItsMinority(t *testing.T) {
	e := newReal(t, nil)
	var nodes []redis.UniversalClient
	for db := range 4 {
		r := redis.NewClient(&redis.Options{Addr: e.srv.Addr(), DB: db})
		defer r.Close()
		nodes = append(nodes, r)
	}
	rl := padlock.NewRedlock(nodes)
	defer rl.Close()
	for _, n := range nodes[2:] { // another holds half the nodes
		require.NoError(t, n.Set(e.ctx, e.key, "other", time.Minute).Err())
	}
	_, err := rl.TryAcquire(e.ctx, e.key, time.Minute, padlock.WithToken("job-b"))
	require.ErrorIs(t, err, padlock.ErrNotAcquired)
	// A node whose take lands after the attempt failed (the two refusals
	// came first) is undone there once it lands.
	for i, n := range nodes[:2] {
		assert.Eventually(t, func() bool { return errors.Is(n.Get(e.ctx, e.key).Err(), redis.Nil) },
			2*time.Second, 10*time.Millisecond, "node %d keeps nothing of the failed acquire", i)
	}
}

// One blackholed node of five holds up no Redlock call: a 2s lock is
// taken, and released, while four nodes answer (before, every call waited
// for the blackholed node: go-redis's ReadTimeout, 3s).
func TestRedlockCallsDoNotWaitForABlackholedNode(t *testing.T) {
	longOnly(t)
	t.Parallel()
	clients, _, proxies := proxiedNodes(t, 5, 1)
	bh := proxies[0]
	c := padlock.NewRedlock(clients)
	ctx := t.Context()
	require.NoError(t, clients[0].Ping(ctx).Err())
	bh.SetBlackhole(true)
	start := time.Now()
	l, err := c.TryAcquire(ctx, "lock:bh", 2*time.Second)
	t.Logf("TryAcquire(2s) with 1 of 5 nodes blackholed: %v after %v", err, time.Since(start).Round(time.Millisecond))
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	start = time.Now()
	l, err = c.TryAcquire(ctx, "lock:bh2", 10*time.Second)
	took := time.Since(start)
	require.NoError(t, err)
	start = time.Now()
	require.NoError(t, l.Release(ctx))
	t.Logf("TryAcquire(10s) took %v, Release %v", took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	assert.Less(t, took+time.Since(start), 2*time.Second, "not the blackholed node's 3s each")
	bh.SetBlackhole(false)
	require.NoError(t, c.Close())
}

// An acquire whose context ends while two of three nodes are slow (their
// acquires land after it returned) leaves nothing behind: the undo waits
// for them on those nodes, though its own context has ended too.
func TestRedlockGivenUpAcquireOnSlowNodesIsUndone(t *testing.T) {
	t.Parallel() // mostly waits
	clients, raws, proxies := proxiedNodes(t, 3, 2)
	c := padlock.NewRedlock(clients)
	t.Cleanup(func() { _ = c.Close() })
	for i, p := range proxies {
		require.NoError(t, clients[i].Ping(t.Context()).Err()) // a connection open: the acquire is sent at once
		p.SetLatency(400 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := c.TryAcquire(ctx, "lock:given-up", time.Minute)
	require.Error(t, err)
	cancel()
	time.Sleep(time.Second) // the acquires have landed on the slow nodes
	require.Eventually(t, func() bool {
		for _, r := range raws {
			if r.Exists(t.Context(), "lock:given-up").Val() != 0 {
				return false
			}
		}
		return true
	}, 5*time.Second, 20*time.Millisecond, "the key left on a node")
}

// A release's call to a node that does not answer is bounded by two
// seconds, whatever the lock's ttl (a tenth of it would be a minute
// here): Close, which waits for it, returns soon.
func TestRedlockReleaseToABlackholedNodeIsBounded(t *testing.T) {
	t.Parallel() // mostly waits
	var clients []redis.UniversalClient
	var proxies []*faultproxy.Proxy
	for range 3 {
		s := redistest.Start(t)
		p, err := faultproxy.Start(s.Addr())
		require.NoError(t, err)
		t.Cleanup(p.Close)
		// Reads end with the call's context, not go-redis's ReadTimeout.
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = rdb.Close() })
		clients, proxies = append(clients, rdb), append(proxies, p)
	}
	c := padlock.NewRedlock(clients)
	l, err := c.TryAcquire(t.Context(), "lock:ten-minutes", 10*time.Minute)
	require.NoError(t, err)
	proxies[0].SetBlackhole(true)
	require.NoError(t, l.Release(t.Context()), "released on a quorum")
	start := time.Now()
	require.NoError(t, c.Close())
	assert.Less(t, time.Since(start), 6*time.Second, "Close waited for the blackholed node's release (2s, not 9s or more)")
}

// A Redlock call returns when its context ends, though the nodes it waits
// for do not answer (go-redis's reads would wait for their ReadTimeout,
// 3s): two of three nodes blackholed, TryAcquire and Extend with 200ms.
// (Release is sent again on a context of its own: see its doc.)
func TestRedlockCallsEndWithTheirContext(t *testing.T) {
	t.Parallel() // mostly waits
	clients, _, proxies := proxiedNodes(t, 3, 2)
	c := padlock.NewRedlock(clients)
	t.Cleanup(func() { _ = c.Close() })
	l, err := c.TryAcquire(t.Context(), "lock:held", time.Minute)
	require.NoError(t, err)
	proxies[0].SetBlackhole(true)
	proxies[1].SetBlackhole(true)
	for name, call := range map[string]func(ctx context.Context) error{
		"TryAcquire": func(ctx context.Context) error {
			_, err := c.TryAcquire(ctx, "lock:bh", time.Minute)
			return err
		},
		"Extend": func(ctx context.Context) error { return l.Extend(ctx, time.Minute) },
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		start := time.Now()
		err := call(ctx)
		took := time.Since(start)
		cancel()
		require.Error(t, err, name)
		assert.Less(t, took, 2*time.Second, "%s returned %v after %v, not at its context's end", name, err, took)
	}
}

// Extend on a Redlock while Close runs: no race between the node calls
// that Close waits for and Close (run it with -race).
func TestRedlockExtendDuringClose(t *testing.T) {
	t.Parallel()
	e := startRedlock(t, 3)
	ctx := context.Background()
	l, err := e.c.TryAcquire(ctx, "lock:race", time.Minute)
	require.NoError(t, err)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = l.Extend(ctx, time.Minute)
		}
	}()
	time.Sleep(50 * time.Millisecond)
	for range 1 {
		_ = e.c.Close()
	}
	close(stop)
	<-done
}

// A late answer of a slow node to the last extend does not set a Redlock
// lock again there after Release returned: a released lock stays
// released.
func TestRedlockReleaseIsNotUndoneByASlowNode(t *testing.T) {
	t.Parallel()
	clients, raws, proxies := proxiedNodes(t, 5, 1)
	slow := proxies[0]
	c := padlock.NewRedlock(clients)
	defer c.Close()
	ctx := t.Context()
	const key, ttl = "lock:zombie", 3 * time.Second
	l, err := c.TryAcquire(ctx, key, ttl)
	require.NoError(t, err)
	require.NoError(t, raws[0].FlushAll(ctx).Err()) // node 0 restarted empty
	slow.SetLatency(40 * time.Millisecond)
	// Warm node 0's pool, so that the Release does not dial.
	done := make(chan struct{})
	for range 4 {
		go func() { _ = clients[0].Ping(ctx).Err(); done <- struct{}{} }()
	}
	for range 4 {
		<-done
	}
	require.NoError(t, l.Extend(ctx, ttl)) // done at the quorum of nodes 1-4
	require.NoError(t, l.Release(ctx))
	for i, r := range raws {
		t.Logf("after Release: node %d: %q", i, r.Get(ctx, key).Val())
	}
	time.Sleep(300 * time.Millisecond)
	v := raws[0].Get(ctx, key).Val()
	pttl := raws[0].PTTL(ctx, key).Val()
	info, _ := c.Inspect(ctx, key)
	t.Logf("300ms after Release: node 0 holds %q (pttl %v); Inspect: held=%v token=%q", v, pttl, info.Held, info.Token)
	require.Empty(t, v, "released lock re-created on node 0 by a late reestablish")
}
