package padlock_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/faultproxy"
)

// probeHook acts on a wait.lua call whose ticket (ARGV[1]) starts with
// prefix and whose mode is "new", once: after it ran, it sleeps delay, or
// (lose) reports a lost reply.
type probeHook struct {
	passHook // dials and pipelines pass through
	prefix   string
	delay    time.Duration
	lose     bool
	fired    atomic.Bool
}

func (h *probeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		if err == nil && isScript(cmd) && len(args) == 9 && args[7] == "new" {
			if s, ok := args[5].(string); ok && strings.HasPrefix(s, h.prefix) && h.fired.CompareAndSwap(false, true) {
				if h.lose {
					cmd.SetErr(context.DeadlineExceeded)
					return context.DeadlineExceeded
				}
				time.Sleep(h.delay)
			}
		}
		return err
	}
}

// A waiter with a short ttl does not shorten its queue's life: a waiter
// with a long ttl behind it is not orphaned from the queue, and gets the
// lock when it is released. And a waiter of the same Client whose first
// attempt took the lock with a reply too slow to keep it (released again)
// attempts again on its backoff, and takes the lock once the network is
// quick.
func TestAShortTicketDoesNotOrphanTheQueue(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	holder, err := e.c.TryAcquire(e.ctx, e.key, time.Minute)
	require.NoError(t, err)

	hook := &probeHook{prefix: "x 1000 0 ", delay: 950 * time.Millisecond}
	rdbA := redis.NewClient(&redis.Options{Addr: e.srv.Addr()})
	rdbA.AddHook(hook)
	defer rdbA.Close()
	cA := padlock.New(rdbA)
	defer cA.Close()
	resA := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(e.ctx, 6*time.Second)
		defer cancel()
		l, err := cA.Acquire(ctx, e.key, 10*time.Second)
		if err == nil {
			_ = l.Release(e.ctx)
		}
		resA <- err
	}()
	waitFor(t, e, 1)

	cZ := padlock.New(e.rdb)
	defer cZ.Close()
	zctx, zcancel := context.WithTimeout(e.ctx, 300*time.Millisecond)
	_, err = cZ.Acquire(zctx, e.key, 100*time.Millisecond)
	zcancel()
	require.ErrorIs(t, err, padlock.ErrNotAcquired)

	time.Sleep(600 * time.Millisecond)
	t.Logf("queue exists: %d, tickets: %v", e.raw.Exists(e.ctx, queueKey(e.key)).Val(), e.raw.Keys(e.ctx, e.key+"*t:*").Val())
	released := time.Now()
	require.NoError(t, holder.Release(e.ctx))
	t.Logf("after release: key=%q", e.get(e.key))

	// B, of the same Client as A, takes the free lock with a slow first reply.
	resB := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(e.ctx, 4*time.Second)
		defer cancel()
		l, err := cA.Acquire(ctx, e.key, time.Second)
		if err == nil {
			_ = l.Release(e.ctx)
		}
		resB <- err
	}()
	errB := <-resB
	t.Logf("B: %v (key now %q)", errB, e.get(e.key))
	assert.NoError(t, errB, "B takes the free lock once the network is quick")
	errA := <-resA
	t.Logf("A: %v, %v after the release (key now %q)", errA, time.Since(released).Round(time.Millisecond), e.get(e.key))
	assert.NoError(t, errA, "A gets the lock released while it waited")
}

// A waiter of a semaphore with another n than its key's is refused, also
// when it comes while a holder of its own Client holds (it makes no round
// trip of its own then): never a WithLimit(3) holder beside one of a
// semaphore of 1.
func TestAnotherLimitIsRefusedWhilePending(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	one := padlock.WithLimit(1)
	g1, err := e.c.Acquire(e.ctx, e.key, time.Minute, one)
	require.NoError(t, err)
	got := make(chan *padlock.Lock, 3)
	for range 2 {
		go func() {
			l, err := e.c.Acquire(e.ctx, e.key, time.Minute, one)
			assert.NoError(t, err)
			got <- l
		}()
	}
	waitFor(t, e, 2)
	require.NoError(t, g1.Release(e.ctx)) // one of them (G2) gets it; the other still waits
	g2 := <-got
	go func() {
		ctx, cancel := context.WithTimeout(e.ctx, 3*time.Second)
		defer cancel()
		l, err := e.c.Acquire(ctx, e.key, time.Minute, padlock.WithLimit(3))
		if err != nil {
			t.Logf("G3: %v", err)
			got <- nil
			return
		}
		got <- l
	}()
	time.Sleep(30 * time.Millisecond) // G3 is pending behind G2
	require.NoError(t, g2.Release(e.ctx))
	a, b := <-got, <-got
	info, err := e.c.Inspect(e.ctx, e.key)
	require.NoError(t, err)
	t.Logf("holders now: %d; stored limit %q", len(info.Holders), e.get(e.key+":{"+e.key+"}:limit"))
	assert.LessOrEqual(t, len(info.Holders), 1, "a semaphore of 1 has at most one holder")
	for _, l := range []*padlock.Lock{a, b} {
		if l != nil {
			_ = l.Release(e.ctx)
		}
	}
}

// A wait whose first attempt ran but whose reply was lost leaves its
// queue all the same: the next release does not grant the lock to a
// ticket that nobody will take up.
func TestALostFirstAttemptLeaves(t *testing.T) {
	e := newReal(t, nil)
	holder, err := e.c.TryAcquire(e.ctx, e.key, time.Minute)
	require.NoError(t, err)
	rdbW := redis.NewClient(&redis.Options{Addr: e.srv.Addr()})
	rdbW.AddHook(&probeHook{prefix: "x ", lose: true})
	defer rdbW.Close()
	cW := padlock.New(rdbW)
	defer cW.Close()
	_, err = cW.Acquire(e.ctx, e.key, time.Minute)
	t.Logf("waiter: %v", err)
	require.Error(t, err)
	t.Logf("queued after it returned: %d", e.raw.ZCard(e.ctx, queueKey(e.key)).Val())
	require.NoError(t, holder.Release(e.ctx))
	time.Sleep(50 * time.Millisecond)
	v := e.get(e.key)
	t.Logf("key after the release: %q pttl %v", v, e.pttl(e.key))
	assert.Empty(t, v, "nobody holds the lock")
}

// A dead AcquireMany at the head of a free key's queue keeps the key's
// waiters out only until its ticket lapses: they look again then.
func TestADeadAcquireManyAtTheHeadLapses(t *testing.T) {
	longOnly(t)
	t.Parallel()
	e := newReal(t, nil)
	a, b := "{o}:a:"+e.key, "{o}:b:"+e.key
	hb, err := e.c.TryAcquire(e.ctx, b, time.Minute)
	require.NoError(t, err)
	rdbM := redis.NewClient(&redis.Options{Addr: e.srv.Addr()})
	cM := padlock.New(rdbM)
	defer cM.Close()
	mctx, mcancel := context.WithCancel(e.ctx)
	mdone := make(chan error, 1)
	go func() { _, err := cM.AcquireMany(mctx, []string{a, b}, time.Minute); mdone <- err }()
	require.Eventually(t, func() bool { return e.raw.ZCard(e.ctx, a+":queue").Val() == 1 }, 5*time.Second, 5*time.Millisecond)
	cY := padlock.New(e.rdb)
	defer cY.Close()
	ydone := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(e.ctx, 9*time.Second)
		defer cancel()
		l, err := cY.Acquire(ctx, a, time.Minute)
		if err == nil {
			_ = l.Release(e.ctx)
		}
		ydone <- err
	}()
	require.Eventually(t, func() bool { return e.raw.ZCard(e.ctx, a+":queue").Val() == 2 }, 5*time.Second, 5*time.Millisecond)
	_ = rdbM.Close() // the AcquireMany's process dies: no leave, no renewal
	mcancel()
	t.Logf("M: %v", <-mdone)
	errY := <-ydone
	t.Logf("Y: %v; %q holds %q; queue %v", errY, a, e.get(a), e.raw.ZRange(e.ctx, a+":queue", 0, -1).Val())
	assert.NoError(t, errY, "Y gets the free key once the dead ticket lapsed")
	_ = hb.Release(e.ctx)
}

// A pub/sub connection that goes silent while it stays open (a NAT that
// forgot it) is found dead by its PING and replaced: Redis sees a new
// subscriber connection, and a grant to the Client's waiters is announced
// at once, not found at the next renewal of the waiter's ticket (2.5s
// after it queued).
func TestAHalfOpenSubscriptionIsReplaced(t *testing.T) {
	t.Parallel() // mostly waits
	e := newReal(t, nil)
	p, err := faultproxy.Start(e.srv.Addr())
	require.NoError(t, err)
	t.Cleanup(p.Close)
	// Pooled connections idle for 50ms are not reused, so that frozen ones
	// hold up only the subscription.
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ConnMaxIdleTime: 50 * time.Millisecond})
	c := padlock.New(rdb)
	padlock.SetPubSubQuiet(c, 200*time.Millisecond)
	t.Cleanup(func() { _ = c.Close(); _ = rdb.Close() })

	// A waiter for another key keeps the subscription open throughout.
	other := e.key + ":other"
	held, err := e.c.TryAcquire(e.ctx, other, time.Minute)
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	// A waiter sleeps once its observer hears WaitStart: it subscribed, and
	// looked once more (no call of it is in flight on a connection that
	// the freeze below would catch).
	asleep := make(chan string, 2)
	sleeping := padlock.WithObserver(&padlock.Observer{WaitStart: func(_ context.Context, key string) { asleep <- key }})
	otherGot := acquireLater(wctx, c, other, time.Minute, sleeping)
	require.Equal(t, other, <-asleep)
	var first []string
	require.Eventually(t, func() bool { first = subscribers(e); return len(first) == 1 }, 5*time.Second, 5*time.Millisecond,
		"the waiter's Client subscribed")

	p.FreezeOpen()
	// A PING after 200ms, no answer 200ms later: replaced.
	require.Eventually(t, func() bool {
		now := subscribers(e)
		return len(now) == 1 && now[0] != first[0]
	}, 5*time.Second, 10*time.Millisecond, "a new subscriber connection, the frozen one closed")

	l, err := e.c.TryAcquire(e.ctx, e.key, time.Minute)
	require.NoError(t, err)
	got := acquireLater(e.ctx, c, e.key, time.Minute, sleeping)
	require.Equal(t, e.key, <-asleep, "queued, its channel subscribed")
	released := time.Now()
	require.NoError(t, l.Release(e.ctx))
	r := <-got
	require.NoError(t, r.err)
	assert.Less(t, time.Since(released), time.Second, "the grant was announced, not found by the ticket's renewal")
	require.NoError(t, r.l.Release(e.ctx))

	// The channel subscribed before the freeze was subscribed again.
	released = time.Now()
	require.NoError(t, held.Release(e.ctx))
	r = <-otherGot
	require.NoError(t, r.err)
	assert.Less(t, time.Since(released), time.Second, "the grant on the channel subscribed again was announced")
	require.NoError(t, r.l.Release(e.ctx))
}

// subscribers are the ids of the connections to e's server that are
// subscribed to a channel (none if it cannot tell).
func subscribers(e *env) []string {
	list, err := e.raw.ClientList(e.ctx).Result()
	if err != nil {
		return nil
	}
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		f := map[string]string{}
		for _, kv := range strings.Fields(line) {
			k, v, _ := strings.Cut(kv, "=")
			f[k] = v
		}
		if (f["sub"] != "" && f["sub"] != "0") || (f["ssub"] != "" && f["ssub"] != "0") {
			ids = append(ids, f["id"])
		}
	}
	return ids
}
