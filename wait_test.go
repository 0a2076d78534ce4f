package padlock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
)

// Waits that must end well, each on real Redis (see the one way to wait).

// A waiter that gives up while a release of its own Client is on its way
// to queue it is not queued by that release when it arrives after the
// waiter left: Redis remembers that it left, and the lock is free.
func TestALeftWaiterIsNotQueuedByALateRelease(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	hook := &holdRelease{held: make(chan struct{}), let: make(chan struct{})}
	e.rdb.AddHook(hook)
	holder, err := e.c.Acquire(e.ctx, e.key, time.Minute) // got by waiting: its release queues the Client's newcomers
	require.NoError(t, err)

	wctx, cancel := context.WithCancel(e.ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := e.c.Acquire(wctx, e.key, time.Minute)
		waited <- err
	}()
	time.Sleep(50 * time.Millisecond) // it waits for the holder's release to queue it
	released := make(chan error, 1)
	go func() { released <- holder.Release(e.ctx) }()
	<-hook.held // the release, carrying the waiter, is on its way
	cancel()
	require.ErrorIs(t, <-waited, padlock.ErrNotAcquired)
	close(hook.let)
	require.NoError(t, <-released)

	assert.Empty(t, e.get(e.key), "nobody holds it: the waiter that left was not queued")
	assert.Zero(t, e.raw.Exists(e.ctx, queueKey(e.key)).Val(), "nobody waits")
	l, err := padlock.New(e.raw).TryAcquire(e.ctx, e.key, time.Second)
	require.NoError(t, err, "the lock is free at once")
	require.NoError(t, l.Release(e.ctx))
}

// A shared hold is not kept waiting behind exclusive waiters that died:
// their tickets lapse and the grant skips them, once the reader that held
// expires.
func TestAReaderIsNotStuckBehindDeadWriters(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	reader, err := e.c.TryAcquire(e.ctx, e.key, 300*time.Millisecond, padlock.WithShared())
	require.NoError(t, err)
	// Kept alive until both writers queue behind it (a child process may
	// take longer than its ttl to start on a loaded machine); then it
	// never comes back: it expires.
	// Both writers are killed only once both wait: a writer killed before
	// the other started could lapse first.
	_, stop := reader.KeepAlive(e.ctx)
	var writers []*child
	for range 2 {
		ch := startChild(t, "waiter", map[string]string{"ADDR": e.srv.Addr(), "KEY": e.key, "REG": e.key + ":reg", "TTL": "500ms"})
		writers = append(writers, ch)
	}
	for _, ch := range writers {
		ch.expect(t, "waiting", 10*time.Second)
	}
	waitFor(t, e, 2)
	for _, ch := range writers {
		require.NoError(t, ch.cmd.Process.Signal(syscall.SIGKILL))
	}
	stop()
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	l, err := e.another(t).Acquire(ctx, e.key, time.Second, padlock.WithShared())
	require.NoError(t, err, "the reader got its hold in the end")
	t.Logf("a reader behind two dead writers held after %v", time.Since(start).Round(time.Millisecond))
	assert.Less(t, time.Since(start), 5*time.Second, "within the dead tickets' life")
	require.NoError(t, l.Release(e.ctx))
}

// A waiting Acquire whose attempt came back with too little of its ttl
// left (the lock is released, not handed out) attempts again as it
// should, and takes the lock once the network is quick: on the attempt
// path of a key with a brace but no hash tag. (A Redlock waits for a node
// ttl/10 at most: a reply that late is not waited for, and counts as a
// node that did not answer.)
func TestAWaiterTriesAgainAfterASlowReply(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		key     string
		redlock bool
	}{{"brace key", "lock:{slow", false}} {
		t.Run(tt.name, func(t *testing.T) {
			e := newReal(t, nil)
			e.rdb.AddHook(&slowFirstAcquire{delay: 920 * time.Millisecond})
			c := e.c
			if tt.redlock {
				c = padlock.NewRedlock([]redis.UniversalClient{e.rdb})
				defer c.Close()
			}
			ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
			defer cancel()
			l, err := c.Acquire(ctx, tt.key, time.Second)
			require.NoError(t, err, "taken on the next attempt")
			require.NoError(t, l.Release(e.ctx))
		})
	}
}

// AcquireMany waits in the same queues as the locks of its keys: a busy
// key, taken and released in a loop by six goroutines of two Clients,
// does not keep it out.
func TestAcquireManyIsNotStarvedByALock(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	a := "{o}:a:" + e.key
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var singles atomic.Int64
	for range 2 {
		c := padlock.New(e.rdb)
		defer c.Close()
		for range 3 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
					l, err := c.Acquire(ctx, a, time.Minute)
					cancel()
					if !assert.NoError(t, err) {
						return
					}
					singles.Add(1)
					time.Sleep(5 * time.Millisecond)
					assert.NoError(t, l.Release(e.ctx))
				}
			})
		}
	}
	time.Sleep(100 * time.Millisecond) // the loop is busy
	ctx, cancel := context.WithTimeout(e.ctx, 6*time.Second)
	defer cancel()
	start := time.Now()
	before := singles.Load()
	m, err := e.another(t).AcquireMany(ctx, []string{a, "{o}:b:" + e.key}, time.Minute)
	close(stop)
	require.NoError(t, err, "AcquireMany got its turn")
	t.Logf("AcquireMany held after %v, %d single-key holds meanwhile", time.Since(start).Round(time.Millisecond), singles.Load()-before)
	assert.Less(t, singles.Load()-before, int64(20), "served in its turn, not after everyone")
	require.NoError(t, m.Release(e.ctx))
	wg.Wait()
}

// A semaphore's limit is stored with the key while anyone holds or waits:
// a call with another n is refused, naming the stored n, and changes
// nothing; once everyone left, another n is fine.
func TestSemaphoreLimitIsStored(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		two := padlock.WithLimit(2)
		h1, err := e.c.TryAcquire(e.ctx, e.key, time.Minute, two)
		require.NoError(t, err)
		h2, err := e.c.TryAcquire(e.ctx, e.key, time.Minute, two)
		require.NoError(t, err)
		waiting := make(chan error, 1)
		wctx, cancel := context.WithCancel(e.ctx)
		defer cancel()
		go func() {
			l, err := e.c.Acquire(wctx, e.key, time.Minute, two)
			if err == nil {
				err = l.Release(e.ctx)
			}
			waiting <- err
		}()
		waitFor(t, e, 1)
		before, err := e.c.Inspect(e.ctx, e.key)
		require.NoError(t, err)
		keys := e.rdb.Keys(e.ctx, "*").Val()
		for _, try := range []func() error{
			func() error { _, err := e.c.TryAcquire(e.ctx, e.key, time.Minute, padlock.WithLimit(3)); return err },
			func() error { _, err := e.c.Acquire(e.ctx, e.key, time.Minute, padlock.WithLimit(1)); return err },
		} {
			err := try()
			require.ErrorIs(t, err, padlock.ErrInvalid)
			assert.NotErrorIs(t, err, padlock.ErrNotAcquired)
			assert.Contains(t, err.Error(), "WithLimit(2)")
		}
		after, err := e.c.Inspect(e.ctx, e.key)
		require.NoError(t, err)
		assert.Len(t, after.Holders, len(before.Holders), "nothing changed")
		assert.Equal(t, before.Waiting, after.Waiting, "nothing changed")
		assert.ElementsMatch(t, keys, e.rdb.Keys(e.ctx, "*").Val(), "nothing written")

		require.NoError(t, h1.Release(e.ctx)) // the waiter gets h1's place, and leaves
		require.NoError(t, <-waiting)
		require.NoError(t, h2.Release(e.ctx))
		l, err := e.c.TryAcquire(e.ctx, e.key, time.Minute, padlock.WithLimit(3))
		require.NoError(t, err, "nobody holds or waits: another n is fine")
		require.NoError(t, l.Release(e.ctx))
	})
}

// A waiter whose process died is skipped once its ticket lapses (within
// five seconds): a release after that goes to the next live waiter at
// once, however long the dead one's ttl.
func TestADeadWaiterIsSkipped(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	holder, err := e.c.TryAcquire(e.ctx, e.key, time.Minute, padlock.WithFencing())
	require.NoError(t, err)
	ch := startChild(t, "waiter", map[string]string{"ADDR": e.srv.Addr(), "KEY": e.key, "REG": e.key + ":reg", "TTL": "1m"})
	ch.expect(t, "waiting", 10*time.Second)
	waitFor(t, e, 1)
	next := make(chan *padlock.Lock, 1)
	go func() {
		l, err := e.another(t).Acquire(e.ctx, e.key, time.Minute, padlock.WithFencing())
		assert.NoError(t, err)
		next <- l
	}()
	waitFor(t, e, 2)
	require.NoError(t, ch.cmd.Process.Signal(syscall.SIGKILL))
	time.Sleep(5500 * time.Millisecond) // its ticket lapses
	released := time.Now()
	require.NoError(t, holder.Release(e.ctx))
	select {
	case l := <-next:
		t.Logf("the live waiter got it %v after the release", time.Since(released).Round(time.Millisecond))
		assert.Equal(t, holder.Fence()+1, l.Fence(), "the dead waiter was given nothing")
		require.NoError(t, l.Release(e.ctx))
	case <-time.After(3 * time.Second):
		t.Fatal("the lock went to the dead waiter")
	}
}

// Readers and writers on one key take turns first come, first served: a
// waiting writer keeps new readers out, and readers that waited before it
// go first. No reader holds beside a writer, and nobody waits long.
func TestReadersAndWritersTakeTurns(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	var (
		mu               sync.Mutex
		readers, writers int // holding now
		reads, writes    int64
		longest          time.Duration
		wg               sync.WaitGroup
	)
	stop := time.Now().Add(2 * time.Second)
	for i := range 8 {
		shared := i < 6
		wg.Go(func() {
			for time.Now().Before(stop) {
				ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
				start := time.Now()
				var opts []padlock.Option
				if shared {
					opts = append(opts, padlock.WithShared())
				}
				l, err := e.c.Acquire(ctx, e.key, time.Minute, opts...)
				cancel()
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				longest = max(longest, time.Since(start))
				if shared {
					readers++
					reads++
				} else {
					writers++
					writes++
				}
				assert.False(t, writers > 1 || writers == 1 && readers > 0, "a writer beside another holder")
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
				mu.Lock()
				if shared {
					readers--
				} else {
					writers--
				}
				mu.Unlock()
				if err := l.Release(e.ctx); !assert.NoError(t, err) && !errors.Is(err, padlock.ErrNotHeld) {
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d shared holds, %d exclusive; the longest wait %v", reads, writes, longest.Round(time.Millisecond))
	assert.Greater(t, reads, int64(0))
	assert.Greater(t, writes, int64(0))
	assert.GreaterOrEqual(t, reads, writes, "readers are not starved")
	assert.Less(t, longest, 3*time.Second, "nobody waits long")
}

// A waiter that misses the message of its grant learns of it all the
// same: at its ticket's next renewal (which finds the ticket gone), or,
// when its pub/sub connection was cut, when the subscription comes back.
func TestAMissedGrantIsFound(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		opts []padlock.Option
		cut  bool
	}{
		{"no notifications, found at renewal", []padlock.Option{padlock.WithoutNotifications(), neverPoll}, false},
		{"pub/sub connection cut", []padlock.Option{neverPoll}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newReal(t, nil)
			holder, err := e.c.TryAcquire(e.ctx, e.key, time.Hour)
			require.NoError(t, err)
			other := padlock.New(e.raw)
			defer other.Close()
			got := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
				defer cancel()
				l, err := other.Acquire(ctx, e.key, time.Minute, tt.opts...)
				if err == nil {
					err = l.Release(e.ctx)
				}
				got <- err
			}()
			waitFor(t, e, 1)
			time.Sleep(100 * time.Millisecond) // subscribed
			if tt.cut {
				require.NoError(t, e.srv.Client().Do(e.ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err())
			}
			released := time.Now()
			require.NoError(t, holder.Release(e.ctx))
			select {
			case err := <-got:
				require.NoError(t, err)
				t.Logf("found %v after the release", time.Since(released).Round(time.Millisecond))
			case <-time.After(5 * time.Second):
				t.Fatal("the grant was never found")
			}
		})
	}
}

// A waiter must not wait out its backoff when the holder's lock expires
// sooner: the failed attempt tells it the remaining ttl.
func TestAcquireWakesWhenTheHolderExpires(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	_, err := e.c.TryAcquire(e.ctx, e.key, 200*time.Millisecond)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	l, err := e.c.Acquire(ctx, e.key, time.Second, slow)
	require.NoError(t, err, "a one-minute backoff would have outlasted the 5s context")
	require.NoError(t, l.Release(e.ctx))
}

func TestAcquireDoesNotBusyLoop(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		warm, err := e.c.Acquire(e.ctx, e.key+":warm", time.Minute) // load the scripts
		require.NoError(t, err)
		require.NoError(t, warm.Release(e.ctx))
		holder, err := e.c.TryAcquire(e.ctx, e.key, time.Minute)
		require.NoError(t, err)
		time.AfterFunc(time.Second, func() { _ = holder.Release(context.Background()) })
		e.n.reset()
		l, err := e.c.Acquire(e.ctx, e.key, time.Minute)
		require.NoError(t, err)
		attempts := e.scripts() - 1 // the holder's release
		// Default backoff: 8ms doubling, jittered, to 512ms: about 8 attempts in 1s.
		if attempts > 12 {
			t.Errorf("%d attempts while waiting 1s: polling too hard", attempts)
		}
		assert.GreaterOrEqual(t, attempts, 2)
		require.NoError(t, l.Release(e.ctx))
	})
}

func TestAcquireWhenTheContextEnds(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		holder, err := e.c.TryAcquire(e.ctx, e.key, time.Minute)
		require.NoError(t, err)
		// A deadline that ends before the first attempt's reply is an
		// error, not contention (see the end): load the scripts first, and
		// leave the first attempt time enough on a loaded machine.
		_, err = e.c.TryAcquire(e.ctx, e.key, time.Second)
		require.ErrorIs(t, err, padlock.ErrNotAcquired)

		ctx, cancel := context.WithTimeout(e.ctx, 400*time.Millisecond)
		defer cancel()
		_, err = e.c.Acquire(ctx, e.key, time.Second)
		require.ErrorIs(t, err, padlock.ErrNotAcquired)
		require.ErrorIs(t, err, context.DeadlineExceeded)

		errTired := errors.New("tired of waiting")
		ctx, cancel = context.WithTimeoutCause(e.ctx, 300*time.Millisecond, errTired)
		defer cancel()
		_, err = e.c.Acquire(ctx, e.key, time.Second)
		require.ErrorIs(t, err, padlock.ErrNotAcquired)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorIs(t, err, errTired, "the context's cause is kept")

		// A context that ended before the call: no round trip, and no
		// claim of contention.
		ctx, cancel = context.WithCancel(e.ctx)
		cancel()
		e.n.reset()
		_, err = e.c.Acquire(ctx, e.key, time.Second)
		require.ErrorIs(t, err, context.Canceled)
		assert.NotErrorIs(t, err, padlock.ErrNotAcquired)
		_, err = e.c.TryAcquire(ctx, e.key, time.Second)
		require.ErrorIs(t, err, context.Canceled)
		trips, _ := e.n.reset()
		assert.Zero(t, trips)
		assert.Equal(t, holder.Token(), unspanned(e.get(e.key)))
	})
}

// A waiter whose wait ends at the moment a release hands it the lock
// passes the lock on to the next waiter, in another Client, at once.
func TestAcquireCancelledWhileHandedTheLock(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		other, holder := e.heldElsewhere(t)
		ctx, cancel := context.WithCancel(e.ctx)
		defer cancel()
		waiting := make(chan struct{})
		cancelAtHandOff := padlock.WithObserver(&padlock.Observer{
			WaitStart: func(context.Context, string) { close(waiting) },
			HandOff:   func(string) { cancel() },
		})

		first := make(chan error, 1)
		go func() {
			_, err := e.c.Acquire(ctx, e.key, time.Minute, cancelAtHandOff, neverPoll)
			first <- err
		}()
		<-waiting // queued, and done attempting
		waitFor(t, e, 1)
		second := acquireLater(e.ctx, other, e.key, time.Minute, neverPoll)
		waitFor(t, e, 2)

		require.NoError(t, holder.Release(e.ctx))
		err := <-first
		require.ErrorIs(t, err, padlock.ErrNotAcquired)
		require.ErrorIs(t, err, context.Canceled)
		select {
		case w := <-second:
			require.NoError(t, w.err)
			assert.Equal(t, w.l.Token(), unspanned(e.get(e.key)), "the next waiter holds it")
			require.NoError(t, w.l.Release(e.ctx))
		case <-time.After(5 * time.Second):
			t.Fatal("the lock was not passed on (only that could wake the second waiter)")
		}
	})
}

// 32 goroutines contend for one lock: no two are ever inside at once (a
// read-pause-write counter loses no update) and the fences each holder
// sees only go up.
func TestContention(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		const goroutines, rounds = 32, 8
		var (
			counter, inside, lastFence atomic.Int64
			wg                         sync.WaitGroup
		)
		fast := padlock.WithBackoff(padlock.ExponentialBackoff(time.Millisecond, 20*time.Millisecond))
		ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
		defer cancel()
		errs := make(chan error, goroutines*rounds)
		for g := range goroutines {
			wg.Go(func() {
				for r := range rounds {
					l, err := e.c.Acquire(ctx, e.key, 10*time.Second, padlock.WithFencing(), fast)
					if err != nil {
						errs <- fmt.Errorf("goroutine %d round %d: %w", g, r, err)
						return
					}
					if n := inside.Add(1); n != 1 {
						errs <- fmt.Errorf("%d holders at once", n)
					}
					if f, last := l.Fence(), lastFence.Load(); f <= last {
						errs <- fmt.Errorf("fence %d after %d", f, last)
					}
					lastFence.Store(l.Fence())
					v := counter.Load()
					time.Sleep(100 * time.Microsecond)
					counter.Store(v + 1)
					inside.Add(-1)
					if err := l.Release(ctx); err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		assert.Equal(t, int64(goroutines*rounds), counter.Load(), "lost updates: two holders overlapped")
		assert.Equal(t, int64(goroutines*rounds), lastFence.Load())
	})
}

func TestReleaseWakesAWaiter(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		holder, err := e.c.TryAcquire(e.ctx, e.key, time.Hour)
		require.NoError(t, err)
		time.AfterFunc(100*time.Millisecond, func() { _ = holder.Release(context.Background()) })

		ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
		defer cancel()
		l, err := e.c.Acquire(ctx, e.key, time.Minute, neverPoll)
		require.NoError(t, err, "only the release notification could have woken the waiter")
		require.NoError(t, l.Release(e.ctx))
	})
}

func TestWithoutNotificationsPolls(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	other := padlock.New(e.raw) // a release through the waiter's own Client would tell it in its reply
	holder, err := other.TryAcquire(e.ctx, e.key, time.Hour)
	require.NoError(t, err)
	// Released once the waiter is queued (a loaded run's first attempt
	// came after a release 50ms in, and took the free key).
	released := make(chan struct{})
	go func() {
		defer close(released)
		for e.ctx.Err() == nil {
			if info, err := other.Inspect(e.ctx, e.key); err == nil && info.Waiting > 0 {
				_ = holder.Release(context.Background())
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { <-released })

	// A waiter without notifications polls on its backoff, but at least
	// every 300ms, to keep its place in the queue: within 200ms it has not
	// looked again since its first attempt.
	ctx, cancel := context.WithTimeout(e.ctx, 200*time.Millisecond)
	defer cancel()
	_, err = e.c.Acquire(ctx, e.key, time.Minute, neverPoll, padlock.WithoutNotifications())
	require.ErrorIs(t, err, padlock.ErrNotAcquired, "without notifications the release goes unheard until the next poll")

	ctx, cancel = context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	l, err := e.c.Acquire(ctx, e.key, time.Minute, neverPoll, padlock.WithoutNotifications())
	require.NoError(t, err, "the lock is free (the first waiter passed on what it may have been handed)")
	t.Logf("acquired after %v", time.Since(start))
	require.NoError(t, l.Release(e.ctx))
}

// Waiters of one Client take the lock in the order they came, and each
// release costs one attempt, not one per waiter.
func TestWaitersAreServedInOrderOneAttemptPerRelease(t *testing.T) {
	t.Parallel() // mostly waits, on servers of its own
	both(t, func(t *testing.T, e *env) {
		const waiters = 6
		require.NoError(t, e.c.TryDo(e.ctx, e.key+":warm", time.Minute, func(context.Context) error { return nil }))
		holder, err := e.c.TryAcquire(e.ctx, e.key, time.Hour)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
		defer cancel()

		var (
			mu    sync.Mutex
			order []int
			wg    sync.WaitGroup
		)
		for i := range waiters {
			wg.Go(func() {
				l, err := e.c.Acquire(ctx, e.key, time.Hour, neverPoll)
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				assert.NoError(t, l.Release(e.ctx))
			})
			time.Sleep(50 * time.Millisecond) // let it queue before the next comes
		}
		e.n.reset()
		require.NoError(t, holder.Release(e.ctx))
		wg.Wait()
		assert.Equal(t, []int{0, 1, 2, 3, 4, 5}, order, "first come, first served")
		// Each handoff: one release, one attempt by the head.
		if scripts := e.scripts(); scripts > 2*waiters+1 {
			t.Errorf("%d script calls for %d handoffs: more than one attempt per release", scripts, waiters)
		}
	})
}

func TestCloseWakesWaiters(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		c := padlock.New(e.rdb)
		holder, err := c.TryAcquire(e.ctx, e.key, time.Hour)
		require.NoError(t, err)
		errs := make(chan error, 3)
		for range 3 {
			go func() {
				_, err := c.Acquire(e.ctx, e.key, time.Minute, neverPoll)
				errs <- err
			}()
		}
		time.Sleep(100 * time.Millisecond)
		require.NoError(t, c.Close())
		for range 3 {
			select {
			case err := <-errs:
				require.ErrorIs(t, err, padlock.ErrClosed)
				assert.NotErrorIs(t, err, padlock.ErrNotAcquired)
			case <-time.After(5 * time.Second):
				t.Fatal("a waiter was not woken by Close")
			}
		}
		_, err = c.Acquire(e.ctx, e.key, time.Minute)
		require.ErrorIs(t, err, padlock.ErrClosed)
		require.NoError(t, c.Close(), "idempotent")
		require.NoError(t, holder.Release(e.ctx), "locks stay usable after Close")
	})
}

// Waiters of different Clients (as of different processes) are served in
// the order they came: a release hands the lock to the first waiter queued
// in Redis, and the others do not take it meanwhile.
func TestWaitersAcrossClientsAreServedInOrder(t *testing.T) {
	both(t, func(t *testing.T, e *env) {
		holder, err := e.c.TryAcquire(e.ctx, e.key, time.Hour)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
		defer cancel()
		var (
			mu    sync.Mutex
			order []int
			wg    sync.WaitGroup
		)
		const clients = 4
		for i := range clients {
			c := padlock.New(e.rdb)
			defer c.Close()
			wg.Go(func() {
				l, err := c.Acquire(ctx, e.key, time.Hour, neverPoll)
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				time.Sleep(5 * time.Millisecond) // the others are woken meanwhile, and must not barge
				assert.NoError(t, l.Release(e.ctx))
			})
			time.Sleep(50 * time.Millisecond) // let it queue before the next comes
		}
		require.NoError(t, holder.Release(e.ctx))
		wg.Wait()
		assert.Equal(t, []int{0, 1, 2, 3}, order, "first come, first served, across clients")
	})
}

// A waiter that vanished while queued (its process died) delays the others
// by the hand-off grace, once; it does not block the lock.
func TestAVanishedWaiterDoesNotBlockTheLock(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		holder, err := e.c.TryAcquire(e.ctx, e.key, time.Hour)
		require.NoError(t, err)
		// A waiter queued long ago that will never come back.
		require.NoError(t, e.raw.ZAdd(e.ctx, queueKey(e.key), redis.Z{Score: 1, Member: "dead-waiter"}).Err())

		ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			l, err := e.c.Acquire(ctx, e.key, time.Minute)
			if err == nil {
				err = l.Release(e.ctx)
			}
			done <- err
		}()
		time.Sleep(50 * time.Millisecond)
		require.NoError(t, holder.Release(e.ctx))
		require.NoError(t, <-done, "the live waiter got the lock after the dead one's grace")
	})
}

// A waiter that gives up leaves the queue in Redis, and hands on a lock
// that a release had handed to it.
func TestAWaiterThatGivesUpLeavesTheQueue(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	holder, err := e.c.TryAcquire(e.ctx, e.key, time.Hour)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(e.ctx, 200*time.Millisecond)
	defer cancel()
	_, err = e.another(t).Acquire(ctx, e.key, time.Minute, neverPoll)
	require.ErrorIs(t, err, padlock.ErrNotAcquired)
	n, err := e.raw.ZCard(e.ctx, queueKey(e.key)).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the waiter left the queue")
	require.NoError(t, holder.Release(e.ctx))
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
	t.Parallel() // mostly waits, on servers of its own
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
	t.Parallel()
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

// A shared hold waited for on a semaphore's key (kinds mixed on one key, by
// mistake) waits until the semaphore's holders are gone; the semaphore's
// releases and the waiters before it go on as before.
func TestAWaiterOfAnotherKindStopsNothing(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
	assert.Equal(t, "-", unspanned(e.get(ticketKey(e.key, "job-7"))), "the mark stays")
	require.NoError(t, l.Release(e.ctx))
	require.NoError(t, h2.Release(e.ctx))
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
	t.Parallel()
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

// A background retry of a Release grants the key to a waiter of the same
// Client: its HandOff runs on the Client's observer goroutine, so a
// HandOff that releases a kept-alive lock does not wait for itself, and
// Close does not hang.
func TestAHandOffFromABackgroundReleaseMayCallPadlock(t *testing.T) {
	e := newReal(t, nil)
	ctx := context.Background()
	require.NoError(t, e.raw.ConfigSet(ctx, "busy-reply-threshold", "10").Err())
	var mu sync.Mutex
	var l2s []*padlock.Lock
	handOffStarted, handOffDone := make(chan struct{}), make(chan struct{})
	var once sync.Once
	obs := &padlock.Observer{HandOff: func(key string) {
		once.Do(func() {
			close(handOffStarted)
			buf := make([]byte, 8192)
			t.Logf("HandOff stack:\n%s", buf[:runtime.Stack(buf, false)])
			mu.Lock()
			ls := append([]*padlock.Lock(nil), l2s...)
			mu.Unlock()
			for _, l := range ls {
				_ = l.Release(ctx)
			}
			close(handOffDone)
		})
	}}
	c := padlock.New(e.rdb, padlock.WithObserver(obs))
	l1, err := c.TryAcquire(ctx, "lock:k1", time.Minute)
	require.NoError(t, err)
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	got := make(chan error, 1)
	go func() {
		l, err := c.Acquire(wctx, "lock:k1", time.Minute)
		if err == nil {
			_ = l.Release(ctx)
		}
		got <- err
	}()
	for {
		info, err := c.Inspect(ctx, "lock:k1")
		require.NoError(t, err)
		if info.Waiting == 1 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i := range 60 {
		l, err := c.TryAcquire(ctx, fmt.Sprintf("lock:l2:%d", i), 300*time.Millisecond)
		require.NoError(t, err)
		l.KeepAlive(ctx)
		mu.Lock()
		l2s = append(l2s, l)
		mu.Unlock()
		time.Sleep(time.Duration(i%7) * time.Millisecond)
	}
	// Redis busy for 60ms: BUSY errors after 10ms.
	go func() {
		_ = e.raw.Eval(ctx, `local s = redis.call('TIME'); local st = s[1] * 1000000 + s[2]
while true do local n = redis.call('TIME'); if n[1] * 1000000 + n[2] - st > 60000 then break end end
return 1`, nil).Err()
	}()
	time.Sleep(25 * time.Millisecond)
	err = l1.Release(ctx)
	t.Logf("Release during BUSY: %v", err)
	require.Error(t, err)
	select {
	case <-handOffStarted:
	case <-time.After(5 * time.Second):
		t.Fatal("no HandOff")
	}
	select {
	case <-handOffDone:
		t.Log("HandOff returned")
	case <-time.After(3 * time.Second):
		closed := make(chan struct{})
		go func() { _ = c.Close(); close(closed) }()
		select {
		case <-closed:
			t.Fatal("HandOff that releases a kept-alive lock did not return in 3s (Close returned)")
		case <-time.After(3 * time.Second):
			t.Fatal("HandOff that releases a kept-alive lock did not return in 3s, and Close hangs")
		}
	}
	require.NoError(t, c.Close())
}

// An observer's callback that closes the Client, on the waiter's own
// goroutine, does not hang Close: the waiter's ticket is not waited for.
func TestCloseFromAWaitersCallback(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	h, err := e.c.TryAcquire(e.ctx, e.key, time.Minute)
	require.NoError(t, err)
	defer func() { _ = h.Release(e.ctx) }()
	var c *padlock.Client
	closed := make(chan struct{})
	c = padlock.New(e.rdb, padlock.WithObserver(&padlock.Observer{WaitStart: func(context.Context, string) {
		_ = c.Close()
		close(closed)
	}}))
	got := acquireLater(e.ctx, c, e.key, time.Minute)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close called from WaitStart did not return")
	}
	require.ErrorIs(t, (<-got).err, padlock.ErrClosed)
}

// A WaitStart that panics (a panic that net/http, say, recovers) ends
// the wait as any failed Acquire does: its ticket leaves the queue, and
// the holder's release grants the key to nobody.
func TestAPanicInWaitStartLeavesTheQueue(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	holder, err := moreClients(t, e, 1)[0].TryAcquire(e.ctx, e.key, time.Minute)
	require.NoError(t, err)
	panicking := padlock.WithObserver(&padlock.Observer{
		WaitStart: func(context.Context, string) { panic("WaitStart") },
	})
	require.PanicsWithValue(t, "WaitStart", func() { _, _ = e.c.Acquire(e.ctx, e.key, time.Minute, panicking) })
	left, err := e.raw.ZCard(e.ctx, queueKey(e.key)).Result()
	require.NoError(t, err)
	require.Zero(t, left, "its ticket left the queue")
	require.NoError(t, holder.Release(e.ctx))
	require.Empty(t, e.get(e.key), "nobody was granted the lock")
}
