package padlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
)

// Waiting with a chosen token (WithToken), which later waits use again, and
// waiters that their own Client's release queued.

// waited is what an Acquire in a goroutine returned.
type waited struct {
	l   *padlock.Lock
	err error
}

// acquireLater runs Acquire in a goroutine and returns its result.
func acquireLater(ctx context.Context, c *padlock.Client, key string, ttl time.Duration, opts ...padlock.Option) <-chan waited {
	ch := make(chan waited, 1)
	go func() {
		l, err := c.Acquire(ctx, key, ttl, opts...)
		ch <- waited{l, err}
	}()
	return ch
}

// grantChannels lists the channels on which grants for key are announced
// to Clients that listen (sharded where the server has it).
func grantChannels(t *testing.T, rdb *redis.Client, key string) []string {
	t.Helper()
	pattern := key + ":{" + key + "}:to:*"
	chans, err := rdb.PubSubShardChannels(t.Context(), pattern).Result()
	if err != nil || len(chans) == 0 {
		chans, err = rdb.PubSubChannels(t.Context(), pattern).Result()
	}
	require.NoError(t, err)
	return chans
}

// A grant message to a chosen token may be late, meant for an earlier
// wait with that token that has passed it on since: the waiter confirms it
// with an attempt instead of returning a Lock the key's holder still has,
// and waits on as before: the real grant, when the holder releases, is
// announced to it (not found at its ticket's renewal, 2.5s after it
// queued).
func TestChosenTokenConfirmsAGrantMessage(t *testing.T) {
	e := newReal(t, nil)
	holder := moreClients(t, e, 1)[0]
	h, err := holder.TryAcquire(e.ctx, e.key, time.Minute)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	got := acquireLater(ctx, e.c, e.key, time.Minute, padlock.WithToken("job-42"))
	waitFor(t, e, 1)
	var channel string
	require.Eventually(t, func() bool {
		chans := grantChannels(t, e.rdb, e.key)
		if len(chans) == 1 {
			channel = chans[0]
		}
		return channel != ""
	}, 5*time.Second, 5*time.Millisecond, "the waiting Client listens")

	// What a release granting an earlier wait of job-42 announced.
	if e.rdb.SPublish(e.ctx, channel, "job-42 0").Err() != nil {
		require.NoError(t, e.rdb.Publish(e.ctx, channel, "job-42 0").Err())
	}
	time.Sleep(100 * time.Millisecond) // its confirming attempt
	select {
	case r := <-got:
		t.Fatalf("Acquire returned (%v) while %q holds the key", r.err, e.get(e.key))
	default:
	}
	require.NoError(t, h.Extend(e.ctx, time.Minute), "the holder still holds the key")

	released := time.Now()
	require.NoError(t, h.Release(e.ctx))
	r := <-got
	require.NoError(t, r.err)
	assert.Less(t, time.Since(released), time.Second, "the real grant was announced to it")
	assert.Equal(t, "job-42", r.l.Token())
	require.NoError(t, r.l.Release(e.ctx))
}

// A call that takes a chosen token's lock again, and fails without
// knowing whether Redis ran it (its reply lost), does not release the lock:
// the token held it before the call.
func TestChosenTokenFailedAcquireKeepsItsLock(t *testing.T) {
	for _, try := range []bool{false, true} {
		name := "Acquire"
		if try {
			name = "TryAcquire"
		}
		t.Run(name, func(t *testing.T) {
			e := newReal(t, nil)
			const job = "pipeline-4711"
			first, err := e.c.TryAcquire(e.ctx, e.key, time.Minute, padlock.WithToken(job), padlock.WithFencing())
			require.NoError(t, err)
			waiters := moreClients(t, e, 1)[0]
			wctx, wcancel := context.WithTimeout(e.ctx, 5*time.Second)
			defer wcancel()
			waiting := acquireLater(wctx, waiters, e.key, time.Minute, padlock.WithFencing())
			waitFor(t, e, 1)

			rdb := redis.NewClient(&redis.Options{Addr: e.srv.Addr()})
			defer rdb.Close()
			rdb.AddHook(&lostReply{})
			again := padlock.New(rdb) // the job run again
			defer again.Close()
			if try {
				_, err = again.TryAcquire(e.ctx, e.key, time.Minute, padlock.WithToken(job), padlock.WithFencing())
			} else {
				_, err = again.Acquire(e.ctx, e.key, time.Minute, padlock.WithToken(job), padlock.WithFencing())
			}
			require.Error(t, err)

			select {
			case w := <-waiting:
				require.NoError(t, w.err)
				t.Fatalf("the other waiter got the lock (fence %d) while %q holds it (fence %d)", w.l.Fence(), job, first.Fence())
			case <-time.After(500 * time.Millisecond):
			}
			require.NoError(t, first.Extend(e.ctx, time.Minute), "the token still holds the key")
			require.NoError(t, first.Release(e.ctx))
			w := <-waiting
			require.NoError(t, w.err)
			require.Greater(t, w.l.Fence(), first.Fence())
			require.NoError(t, w.l.Release(e.ctx))
		})
	}
}

// A process that waited with a chosen token died; its run again waits
// with the same token, fenced, while the dead wait's ticket still lives.
// It takes that ticket over as itself: its grant is fenced, and announced
// to its own Client.
func TestChosenTokenTakesOverADeadWaitersTicket(t *testing.T) {
	e := newReal(t, nil)
	const job = "job-9"
	other := moreClients(t, e, 1)[0]
	h, err := other.TryAcquire(e.ctx, e.key, time.Minute, padlock.WithFencing())
	require.NoError(t, err)

	// The first run waits, unfenced, and its process dies: its connections
	// go before it can leave.
	rdb := redis.NewClient(&redis.Options{Addr: e.srv.Addr()})
	dead := padlock.New(rdb)
	dctx, dcancel := context.WithCancel(e.ctx)
	died := acquireLater(dctx, dead, e.key, time.Minute, padlock.WithToken(job))
	waitFor(t, e, 1)
	require.NoError(t, rdb.Close())
	dcancel()
	<-died
	require.NoError(t, dead.Close())
	require.NotEmpty(t, e.get(ticketKey(e.key, job)), "the dead run's ticket is still there")

	rctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	rerun := acquireLater(rctx, e.c, e.key, time.Minute, padlock.WithToken(job), padlock.WithFencing())
	require.Eventually(t, func() bool {
		return strings.HasPrefix(e.get(ticketKey(e.key, job)), "x 60000 0 1 ") // its own ticket now: fenced
	}, 5*time.Second, 5*time.Millisecond)
	start := time.Now()
	require.NoError(t, h.Release(e.ctx))
	r := <-rerun
	require.NoError(t, r.err)
	require.Greater(t, r.l.Fence(), h.Fence(), "a fence greater than the holder's before")
	require.Less(t, time.Since(start), time.Second, "told at once, not at its ticket's next renewal")
	require.NoError(t, r.l.Release(e.ctx))
}

// A chosen token that gave up waiting comes back while a Lock of its own
// Client holds the key: it queues itself, over the mark its leave left,
// and takes the key when it is free.
func TestChosenTokenWaitsAgainBehindItsOwnClient(t *testing.T) {
	e := newReal(t, nil)
	const job = "job-7"
	other := moreClients(t, e, 1)[0]
	h, err := other.TryAcquire(e.ctx, e.key, time.Minute)
	require.NoError(t, err)

	gWait := acquireLater(e.ctx, e.c, e.key, time.Minute)
	waitFor(t, e, 1)
	actx, acancel := context.WithCancel(e.ctx)
	aWait := acquireLater(actx, e.c, e.key, time.Minute, padlock.WithToken(job))
	waitFor(t, e, 2)
	dWait := acquireLater(e.ctx, e.c, e.key, time.Minute)
	waitFor(t, e, 3)

	require.NoError(t, h.Release(e.ctx))
	g := <-gWait
	require.NoError(t, g.err)
	acancel()
	a := <-aWait
	require.ErrorIs(t, a.err, padlock.ErrNotAcquired)
	require.Equal(t, "-", e.get(ticketKey(e.key, job)), "its leave is remembered")

	bctx, bcancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer bcancel()
	bWait := acquireLater(bctx, e.c, e.key, time.Minute, padlock.WithToken(job))
	time.Sleep(20 * time.Millisecond) // behind g, a Lock of its Client
	require.NoError(t, g.l.Release(e.ctx))
	d := <-dWait
	require.NoError(t, d.err)
	require.NoError(t, d.l.Release(e.ctx))
	select {
	case b := <-bWait:
		require.NoError(t, b.err, "the free key goes to job-7")
		require.NoError(t, b.l.Release(e.ctx))
	case <-time.After(2 * time.Second):
		info, err := e.c.Inspect(e.ctx, e.key)
		require.NoError(t, err)
		t.Fatalf("job-7 still waits; the key is held: %v, by %d waiting", info.Held, info.Waiting)
	}
}

// A waiter that a release of its own Client queued never attempted; it
// learns from that release when the holder expires, as an attempt would
// tell it. So when the waiters ahead of it belong to a process that died,
// it takes the key once their grants and tickets run out, not at the end
// of its context.
func TestCarriedWaiterLooksWhenTheHolderExpires(t *testing.T) {
	t.Parallel() // mostly waits
	e := newReal(t, nil)
	other := moreClients(t, e, 1)[0]
	h, err := other.TryAcquire(e.ctx, e.key, time.Minute)
	require.NoError(t, err)
	lWait := acquireLater(e.ctx, e.c, e.key, time.Minute)
	waitFor(t, e, 1)
	vWait := acquireLater(e.ctx, e.c, e.key, 2*time.Second)
	waitFor(t, e, 2)
	// Another process queues two waiters, then dies.
	rdb := redis.NewClient(&redis.Options{Addr: e.srv.Addr()})
	dead := padlock.New(rdb)
	dctx, dcancel := context.WithCancel(e.ctx)
	x := acquireLater(dctx, dead, e.key, time.Second)
	waitFor(t, e, 3)
	y := acquireLater(dctx, dead, e.key, time.Second)
	waitFor(t, e, 4)
	require.NoError(t, rdb.Close())
	dcancel()
	<-x
	<-y
	require.NoError(t, dead.Close())

	require.NoError(t, h.Release(e.ctx))
	l := <-lWait
	require.NoError(t, l.err)
	wctx, wcancel := context.WithTimeout(e.ctx, 15*time.Second)
	defer wcancel()
	wWait := acquireLater(wctx, e.c, e.key, time.Minute) // behind l, of its Client: queued by l's release
	require.Never(t, func() bool { return len(wWait) > 0 }, 50*time.Millisecond, 5*time.Millisecond)
	require.NoError(t, l.l.Release(e.ctx)) // to V, whose 2s is what W learns
	v := <-vWait
	require.NoError(t, v.err)
	start := time.Now()
	require.NoError(t, v.l.Release(e.ctx)) // to the dead X; the hint goes to the dead Y
	select {
	case w := <-wWait:
		require.NoError(t, w.err)
		t.Logf("W took the key %v after V's release", time.Since(start).Round(time.Millisecond))
		require.NoError(t, w.l.Release(e.ctx))
	case <-time.After(10 * time.Second):
		t.Fatal("W still waits for a key that the dead waiters' grants and tickets no longer keep")
	}
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
	for i, n := range nodes[:2] {
		require.ErrorIs(t, n.Get(e.ctx, e.key).Err(), redis.Nil, "node %d keeps nothing of the failed acquire", i)
	}
}

// A shared hold waited for on a semaphore's key (kinds mixed on one key, by
// mistake) waits until the semaphore's holders are gone; the semaphore's
// releases and the waiters before it go on as before.
func TestAWaiterOfAnotherKindStopsNothing(t *testing.T) {
	e := newReal(t, nil)
	sem := padlock.WithLimit(2)
	a, err := e.c.TryAcquire(e.ctx, e.key, time.Minute, sem)
	require.NoError(t, err)
	b, err := e.c.TryAcquire(e.ctx, e.key, time.Minute, sem)
	require.NoError(t, err)
	cWait := acquireLater(e.ctx, e.c, e.key, time.Minute, sem)
	waitFor(t, e, 1)
	other := moreClients(t, e, 1)[0]
	sctx, scancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer scancel()
	sWait := acquireLater(sctx, other, e.key, time.Minute, padlock.WithShared())
	waitFor(t, e, 2)

	require.NoError(t, a.Release(e.ctx))
	c := <-cWait
	require.NoError(t, c.err, "the semaphore's waiter takes the place")
	require.NoError(t, b.Release(e.ctx))
	require.NoError(t, c.l.Release(e.ctx))
	s := <-sWait
	require.NoError(t, s.err, "the shared hold, once the semaphore's holders are gone")
	require.NoError(t, s.l.Release(e.ctx))
}

// A try with a chosen token has no ticket and touches none: the mark that
// an earlier wait of the token left (so that no late call of it queues it
// again) stays.
func TestChosenTokenTryLeavesTheMark(t *testing.T) {
	e := newReal(t, nil)
	two := padlock.WithLimit(2)
	h1, err := e.c.TryAcquire(e.ctx, e.key, time.Minute, two)
	require.NoError(t, err)
	h2, err := e.c.TryAcquire(e.ctx, e.key, time.Minute, two)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(e.ctx, 200*time.Millisecond)
	defer cancel()
	_, err = e.c.Acquire(ctx, e.key, time.Minute, two, padlock.WithToken("job-7"))
	require.ErrorIs(t, err, padlock.ErrNotAcquired)
	require.Equal(t, "-", e.get(ticketKey(e.key, "job-7")), "the wait left its mark")

	require.NoError(t, h1.Release(e.ctx))
	l, err := e.c.TryAcquire(e.ctx, e.key, time.Minute, two, padlock.WithToken("job-7"))
	require.NoError(t, err, "a place is free")
	assert.Equal(t, "-", e.get(ticketKey(e.key, "job-7")), "the mark stays")
	require.NoError(t, l.Release(e.ctx))
	require.NoError(t, h2.Release(e.ctx))
}
