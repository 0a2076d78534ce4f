package padlock_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/faultproxy"
	"github.com/padlock-go/padlock/internal/redistest"
)

// campaignLater campaigns on c in a goroutine of its own, and sends the
// Leadership (nil on an error, which fails the test) when it has it.
func campaignLater(t *testing.T, c *padlock.Client, ctx context.Context, key string, ttl time.Duration, value string) <-chan *padlock.Leadership {
	got := make(chan *padlock.Leadership, 1)
	go func() {
		l, err := c.Campaign(ctx, key, ttl, value)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	return got
}

// Three candidates run Lead for a few seconds, each giving up the lead
// after a short term: one leads at a time, and the terms go up.
func TestElectionOneLeaderAtATime(t *testing.T) {
	t.Parallel() // mostly waits
	e := newReal(t, nil)
	cs := moreClients(t, e, 3)
	var (
		leading atomic.Int32
		mu      sync.Mutex
		terms   []int64
		wg      sync.WaitGroup
	)
	stop := time.Now().Add(3 * time.Second)
	for i, c := range cs {
		wg.Go(func() {
			for time.Now().Before(stop) {
				ctx, cancel := context.WithDeadline(e.ctx, stop)
				err := c.Lead(ctx, e.key, time.Second, fmt.Sprintf("node-%d", i), func(ctx context.Context) error {
					if !leading.CompareAndSwap(0, 1) {
						t.Error("two leaders at once")
					}
					defer leading.Store(0)
					info, err := c.Leader(ctx, e.key)
					if ctx.Err() != nil {
						return nil // the run's time ran out (or the lead ended) during the call
					}
					if err != nil || info.Value != fmt.Sprintf("node-%d", i) {
						t.Errorf("Leader while leading: %+v %v", info, err)
					}
					mu.Lock()
					terms = append(terms, info.Term)
					mu.Unlock()
					time.Sleep(20 * time.Millisecond)
					return nil
				})
				cancel()
				if err != nil && ctx.Err() == nil {
					t.Errorf("Lead: %v", err)
				}
			}
		})
	}
	wg.Wait()
	require.Greater(t, len(terms), 10, "leaders changed")
	for i := 1; i < len(terms); i++ {
		require.Greater(t, terms[i], terms[i-1], "terms strictly increase")
	}
}

func TestResignHandsOverAtOnce(t *testing.T) {
	e := newReal(t, nil)
	cs := moreClients(t, e, 2)
	first, err := cs[0].Campaign(e.ctx, e.key, 10*time.Second, "a")
	require.NoError(t, err)
	assert.Equal(t, "a", first.Value())
	got := campaignLater(t, cs[1], e.ctx, e.key, 10*time.Second, "b")
	waitFor(t, e, 1)
	resigned := time.Now()
	require.NoError(t, first.Resign(e.ctx))
	var next *padlock.Leadership
	select {
	case next = <-got:
	case <-time.After(time.Second):
		t.Fatal("no new leader")
	}
	assert.Less(t, time.Since(resigned), 500*time.Millisecond, "the next leads at once")
	assert.Greater(t, next.Term(), first.Term())
	require.Error(t, first.Context().Err())
	assert.ErrorIs(t, context.Cause(first.Context()), padlock.ErrNotHeld)
	require.ErrorIs(t, first.Proclaim(e.ctx, "again"), padlock.ErrNotHeld)
	require.ErrorIs(t, first.Resign(e.ctx), padlock.ErrNotHeld)

	require.NoError(t, next.Proclaim(e.ctx, "b2"))
	info, err := e.c.Leader(e.ctx, e.key)
	require.NoError(t, err)
	assert.Equal(t, padlock.LeaderInfo{Value: "b2", Term: next.Term(), TTL: info.TTL}, info)
	assert.Greater(t, info.TTL, 5*time.Second)
	require.NoError(t, next.Resign(e.ctx))
	_, err = e.c.Leader(e.ctx, e.key)
	require.ErrorIs(t, err, padlock.ErrNoLeader)

	// A lock that Campaign did not take is no leader.
	plain, err := e.c.TryAcquire(e.ctx, e.key, time.Second, padlock.WithFencing(), padlock.WithMetadata("b2"))
	require.NoError(t, err)
	_, err = e.c.Leader(e.ctx, e.key)
	require.ErrorIs(t, err, padlock.ErrNoLeader)
	require.NoError(t, plain.Release(e.ctx))

	_, err = padlock.NewRedlock([]redis.UniversalClient{e.raw}).Campaign(e.ctx, e.key, time.Second, "x")
	require.ErrorIs(t, err, padlock.ErrInvalid, "no terms without one counter")
}

// A leader whose connection is blackholed: the next candidate leads within
// ttl + 1s, and the old one's Context ends with ErrLost by its deadline.
func TestLeaderBlackholed(t *testing.T) {
	t.Parallel() // mostly waits
	e := newReal(t, nil)
	p, err := faultproxy.Start(e.srv.Addr())
	require.NoError(t, err)
	t.Cleanup(p.Close)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	defer rdb.Close()
	c := padlock.New(rdb)
	defer c.Close()
	const ttl = time.Second
	old, err := c.Campaign(e.ctx, e.key, ttl, "old")
	require.NoError(t, err)
	next := moreClients(t, e, 1)[0]
	got := campaignLater(t, next, e.ctx, e.key, ttl, "next")
	time.Sleep(200 * time.Millisecond)
	p.SetBlackhole(true)
	cut := time.Now()
	select {
	case <-old.Context().Done():
		assert.ErrorIs(t, context.Cause(old.Context()), padlock.ErrLost)
		assert.Less(t, time.Since(cut), ttl+50*time.Millisecond, "by its local deadline")
	case <-time.After(ttl + time.Second):
		t.Fatal("the old leader's Context did not end")
	}
	select {
	case l := <-got:
		assert.Less(t, time.Since(cut), ttl+time.Second)
		assert.Greater(t, l.Term(), old.Term())
		require.NoError(t, l.Resign(e.ctx))
	case <-time.After(ttl + time.Second):
		t.Fatal("no new leader within ttl + 1s")
	}
	p.SetBlackhole(false)
}

// Observe reports every leader in order, a Proclaim with the same term,
// and still the next change after its pub/sub connection was killed.
func TestObserve(t *testing.T) {
	e := newReal(t, nil)
	cs := moreClients(t, e, 4)
	ctx, cancel := context.WithCancel(e.ctx)
	states := cs[3].Observe(ctx, e.key)
	next := func(what string) padlock.LeaderInfo {
		t.Helper()
		select {
		case s := <-states:
			return s
		case <-time.After(3 * time.Second):
			t.Fatalf("no report of %s", what)
		}
		return padlock.LeaderInfo{}
	}
	assert.Equal(t, padlock.LeaderInfo{}, next("the start"), "nobody leads")

	a, err := cs[0].Campaign(e.ctx, e.key, 5*time.Second, "a")
	require.NoError(t, err)
	s := next("a")
	assert.Equal(t, "a", s.Value)
	assert.Equal(t, a.Term(), s.Term)
	assert.Positive(t, s.TTL)

	require.NoError(t, a.Proclaim(e.ctx, "a2"))
	s = next("a2")
	assert.Equal(t, padlock.LeaderInfo{Value: "a2", Term: a.Term(), TTL: s.TTL}, s)

	waiting := campaignLater(t, cs[1], e.ctx, e.key, 5*time.Second, "b")
	waitFor(t, e, 1)
	require.NoError(t, a.Resign(e.ctx))
	b := <-waiting
	s = next("b")
	if s.Term == 0 { // the moment between a's resign and b's grant
		s = next("b")
	}
	assert.Equal(t, "b", s.Value)
	assert.Equal(t, b.Term(), s.Term)

	// Cut the observer's subscription: it still reports the next change.
	require.NoError(t, e.raw.Do(e.ctx, "client", "kill", "type", "pubsub").Err())
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, b.Resign(e.ctx))
	assert.Equal(t, padlock.LeaderInfo{}, next("no leader"))
	c, err := cs[2].Campaign(e.ctx, e.key, 5*time.Second, "c")
	require.NoError(t, err)
	s = next("c")
	assert.Equal(t, "c", s.Value)
	assert.Greater(t, s.Term, b.Term())

	cancel()
	for range states { // closed once ctx is done
	}
	require.NoError(t, c.Resign(e.ctx))
}

// Close ends an Observe of the Client as its ctx would: the channel
// closes, and the goroutines behind it are gone (goleak, at the end of the
// run); an Observe after Close is a closed channel.
func TestCloseEndsObserve(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	c := moreClients(t, e, 1)[0]
	states := c.Observe(context.Background(), e.key)
	select {
	case s := <-states:
		assert.Equal(t, padlock.LeaderInfo{}, s, "nobody leads")
	case <-time.After(3 * time.Second):
		t.Fatal("no report of the start")
	}
	require.NoError(t, c.Close())
	select {
	case _, open := <-states:
		assert.False(t, open, "no report after Close")
	case <-time.After(3 * time.Second):
		t.Fatal("Observe still runs after Close")
	}
	_, open := <-c.Observe(context.Background(), e.key)
	assert.False(t, open, "an Observe after Close")
}

// Lead: fn's context ends when the lease is deleted from outside, fn runs
// again after the next campaign, and cancelling Lead resigns at once.
func TestLead(t *testing.T) {
	e := newReal(t, nil)
	cs := moreClients(t, e, 2)
	starts := make(chan context.Context, 4)
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() {
		done <- cs[0].Lead(ctx, e.key, 600*time.Millisecond, "runner", func(ctx context.Context) error {
			if ld := padlock.LeadershipFromContext(ctx); ld == nil || ld.Term() < 1 || ld.Value() != "runner" {
				t.Errorf("LeadershipFromContext: %+v", ld)
			}
			starts <- ctx
			<-ctx.Done()
			return nil
		})
	}()
	first := <-starts
	require.NoError(t, e.raw.Del(e.ctx, e.key).Err())
	waitDone(t, first, time.Second)
	assert.ErrorIs(t, context.Cause(first), padlock.ErrLost)
	select {
	case <-starts:
	case <-time.After(2 * time.Second):
		t.Fatal("fn did not run again after the next campaign")
	}

	got := campaignLater(t, cs[1], e.ctx, e.key, time.Second, "other")
	waitFor(t, e, 1)
	stopped := time.Now()
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	l := <-got
	assert.Less(t, time.Since(stopped), 500*time.Millisecond, "Lead resigned")
	require.NoError(t, l.Resign(e.ctx))

	// fn that returns while leading ends Lead with its error, resigned.
	err := cs[0].Lead(e.ctx, e.key, time.Second, "once", func(context.Context) error { return fmt.Errorf("done") })
	require.EqualError(t, err, "done")
	_, err = e.c.Leader(e.ctx, e.key)
	require.ErrorIs(t, err, padlock.ErrNoLeader)
	require.ErrorIs(t, cs[0].Lead(e.ctx, e.key, time.Second, "x", nil), padlock.ErrInvalid)
}

// The election on a Cluster (for keys on every master) and with
// WithReplicas; Resume and Break on a Cluster too.
func TestElectionOnClusterAndReplicas(t *testing.T) {
	longOnly(t)
	t.Parallel() // starts servers of its own; mostly waits
	_, cc := startCluster(t)
	ctx := patientCtx(t)
	a, b, o := padlock.New(cc), padlock.New(cc), padlock.New(cc)
	defer a.Close()
	defer b.Close()
	defer o.Close()
	for _, key := range []string{"lead:a", "lead:b", "lead:c", "lead:{x}:y"} {
		states := o.Observe(ctx, key)
		require.Equal(t, padlock.LeaderInfo{}, <-states, key)
		la, err := a.Campaign(ctx, key, 5*time.Second, "a")
		require.NoError(t, err, key)
		require.Equal(t, "a", (<-states).Value, key)
		got := campaignLater(t, b, ctx, key, 5*time.Second, "b")
		waitForOn(t, o, key, 1)
		require.NoError(t, la.Resign(ctx))
		lb := <-got
		s := <-states
		for s.Value != "b" {
			s = <-states
		}
		assert.Equal(t, lb.Term(), s.Term, key)
		assert.Greater(t, lb.Term(), la.Term(), key)

		// Resume and Break, on the same key's master.
		info, err := o.Break(ctx, key)
		require.NoError(t, err, key)
		assert.Equal(t, "b", info.Metadata, key)
		waitDone(t, lb.Context(), 5*time.Second)
		l, err := a.TryAcquire(ctx, key, 10*time.Second, padlock.WithToken("job"))
		require.NoError(t, err, key)
		r, err := b.Resume(ctx, key, "job")
		require.NoError(t, err, key)
		require.NoError(t, r.Release(ctx), key)
		require.ErrorIs(t, l.Release(ctx), padlock.ErrNotHeld, key)
	}

	e := newReal(t, nil)
	replica := redistest.StartReplica(t, e.srv)
	rr := replica.Client()
	c := padlock.New(e.rdb, padlock.WithReplicas(1, 300*time.Millisecond))
	defer c.Close()
	l, err := c.Campaign(e.ctx, e.key, 5*time.Second, "replicated")
	require.NoError(t, err)
	assert.Equal(t, "replicated", strings.SplitN(unspanned(rr.Get(e.ctx, e.key).Val()), " ", 2)[1], "on the replica when Campaign returned")
	require.NoError(t, l.Resign(e.ctx))
}

// Observe with bad input returns a closed channel; so does Leader an
// error, and Campaign ErrInvalid.
func TestElectionBadInput(t *testing.T) {
	t.Parallel()
	e := newMini(t)
	var noCtx context.Context
	for _, states := range []<-chan padlock.LeaderInfo{e.c.Observe(noCtx, e.key), e.c.Observe(e.ctx, ""), (*padlock.Client)(nil).Observe(e.ctx, e.key)} {
		_, open := <-states
		assert.False(t, open)
	}
	_, err := e.c.Leader(e.ctx, "")
	require.ErrorIs(t, err, padlock.ErrInvalid)
	_, err = e.c.Campaign(e.ctx, e.key, 0, "x")
	require.ErrorIs(t, err, padlock.ErrInvalid)
}

// A leadership is one lock of the whole key, whatever the Client's or the
// call's options: two Clients made WithLimit(3) cannot both lead, and
// WithLimit or WithShared given to Campaign are refused.
func TestCampaignIsAlwaysOneLock(t *testing.T) {
	t.Parallel() // mostly waits, on servers of its own
	e := newReal(t, nil)
	var cs []*padlock.Client
	for _, o := range []padlock.Option{padlock.WithLimit(3), padlock.WithShared()} {
		c := padlock.New(e.rdb, o)
		t.Cleanup(func() { _ = c.Close() })
		cs = append(cs, c)
	}
	first, err := cs[0].Campaign(e.ctx, e.key, time.Minute, "first")
	require.NoError(t, err)
	for _, c := range append(cs, padlock.New(e.rdb, padlock.WithLimit(3))) {
		ctx, cancel := context.WithTimeout(e.ctx, 300*time.Millisecond)
		_, err := c.Campaign(ctx, e.key, time.Minute, "second")
		cancel()
		require.ErrorIs(t, err, padlock.ErrNotAcquired, "one leader at a time")
		_ = c.Close()
	}
	info, err := e.c.Leader(e.ctx, e.key)
	require.NoError(t, err)
	assert.Equal(t, "first", info.Value)
	assert.Equal(t, first.Term(), info.Term)
	for _, o := range []padlock.Option{padlock.WithLimit(3), padlock.WithShared()} {
		_, err := e.c.Campaign(e.ctx, e.key+":other", time.Minute, "x", o)
		require.ErrorIs(t, err, padlock.ErrInvalid)
		require.ErrorIs(t, e.c.Lead(e.ctx, e.key+":other", time.Minute, "x", func(context.Context) error { return nil }, o), padlock.ErrInvalid)
	}
	assert.Zero(t, e.raw.Exists(e.ctx, e.key+":other").Val(), "nothing written")
	require.NoError(t, first.Resign(e.ctx))
}

// The reply to the attempt that won the key is lost: Campaign fails, and
// leaves no ghost leader behind (its token was generated, never given to
// the caller): Leader says nobody leads, the next candidate leads at once.
func TestCampaignWithALostReplyLeavesNoGhost(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	e.rdb.AddHook(&lostReply{})
	_, err := e.c.Campaign(e.ctx, e.key, time.Minute, "ghost")
	require.ErrorIs(t, err, errLostReply)
	_, err = e.c.Leader(e.ctx, e.key)
	require.ErrorIs(t, err, padlock.ErrNoLeader)
	ctx, cancel := context.WithTimeout(e.ctx, time.Second)
	defer cancel()
	next, err := moreClients(t, e, 1)[0].Campaign(ctx, e.key, time.Minute, "next")
	require.NoError(t, err, "the next candidate leads at once")
	require.NoError(t, next.Resign(e.ctx))
}

// Proclaim that finds the leadership gone (an operator's Break) ends its
// Context with ErrLost before it returns.
func TestProclaimThatFindsTheLeadGoneEndsContext(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	ld, err := e.c.Campaign(e.ctx, e.key, time.Minute, "a")
	require.NoError(t, err)
	_, err = moreClients(t, e, 1)[0].Break(e.ctx, e.key)
	require.NoError(t, err)
	require.ErrorIs(t, ld.Proclaim(e.ctx, "b"), padlock.ErrNotHeld)
	require.Error(t, ld.Context().Err(), "ended before Proclaim returned")
	assert.ErrorIs(t, context.Cause(ld.Context()), padlock.ErrLost)
}

// A leading Client whose Redis stops answering loses the lead, and Close
// then waits for the goroutine that announces the loss (blocked on a
// PUBLISH that go-redis bounds by its read timeout, not by padlock's
// context): none of padlock's goroutines is left when Close returns.
func TestCloseWaitsForTheLossAnnouncement(t *testing.T) {
	e := newReal(t, nil)
	p, err := faultproxy.Start(e.srv.Addr())
	require.NoError(t, err)
	t.Cleanup(p.Close)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: 500 * time.Millisecond})
	defer rdb.Close()
	c := padlock.New(rdb)
	ld, err := c.Campaign(e.ctx, e.key, 300*time.Millisecond, "a")
	require.NoError(t, err)
	p.SetBlackhole(true)
	waitDone(t, ld.Context(), 2*time.Second)
	require.ErrorIs(t, context.Cause(ld.Context()), padlock.ErrLost)
	require.NoError(t, c.Close())
	// The announcing goroutine is counted done as its last deferred call:
	// under load it may still be returning when Close does.
	if !assert.Eventually(t, func() bool { return padlockGoroutines() == 0 }, time.Second, time.Millisecond,
		"no goroutine of padlock's left after Close") {
		t.Logf("padlock's goroutines:\n%s", strings.Join(padlockStacks(), "\n\n"))
	}
	p.SetBlackhole(false)
}

// A panicking fn in Lead: Lead resigns, the panic goes on, and the next
// candidate leads within a second.
func TestLeadResignsWhenFnPanics(t *testing.T) {
	e := newReal(t, nil)
	running := make(chan struct{})
	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover() }()
		_ = e.c.Lead(e.ctx, e.key, time.Minute, "a", func(context.Context) error {
			close(running)
			time.Sleep(100 * time.Millisecond)
			panic("fn failed")
		})
	}()
	<-running
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	got := campaignLater(t, moreClients(t, e, 1)[0], ctx, e.key, time.Minute, "b")
	assert.Equal(t, "fn failed", <-panicked, "the panic goes on")
	panicAt := time.Now()
	next := <-got
	require.NotNil(t, next)
	assert.Less(t, time.Since(panicAt), time.Second, "the next candidate leads at once, not after a ttl")
	require.NoError(t, next.Resign(e.ctx))
}

// Lead, whose first Campaign's winning reply is lost, does not wait behind
// its own ghost: it campaigns again and runs fn at once, not after the ttl.
func TestLeadWithALostReplyLeavesNoGhost(t *testing.T) {
	e := newReal(t, nil)
	e.rdb.AddHook(&lostReply{})
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	err := e.c.Lead(ctx, e.key, time.Minute, "a", func(context.Context) error { return nil })
	require.NoError(t, err)
	assert.Less(t, time.Since(start), 2*time.Second, "fn ran at once, not after the ghost's ttl")
}
