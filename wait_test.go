package padlock_test

import (
	"context"
	"errors"
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

// holdRelease is a go-redis hook that holds back the first release script
// until let is closed, after telling held.
type holdRelease struct {
	passHook // dials and pipelines pass through
	fired    atomic.Bool
	held     chan struct{}
	let      chan struct{}
}

func (h *holdRelease) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) > 1 && args[0] == "evalsha" && args[1] == padlock.ReleaseScriptSHA() && h.fired.CompareAndSwap(false, true) {
			close(h.held)
			<-h.let
		}
		return next(ctx, cmd)
	}
}

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
	_ = reader // it never comes back: it expires
	for i := range 2 {
		ch := startChild(t, "waiter", map[string]string{"ADDR": e.srv.Addr(), "KEY": e.key, "REG": e.key + ":reg", "TTL": "500ms"})
		ch.expect(t, "waiting", 10*time.Second)
		waitFor(t, e, i+1)
		require.NoError(t, ch.cmd.Process.Signal(syscall.SIGKILL))
	}
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	l, err := padlock.New(e.rdb).Acquire(ctx, e.key, time.Second, padlock.WithShared())
	require.NoError(t, err, "the reader got its hold in the end")
	t.Logf("a reader behind two dead writers held after %v", time.Since(start).Round(time.Millisecond))
	assert.Less(t, time.Since(start), 5*time.Second, "within the dead tickets' life")
	require.NoError(t, l.Release(e.ctx))
}

// slowFirstAcquire is a go-redis hook that delays the first successful
// reply of a script (an acquire, in the test) by delay.
type slowFirstAcquire struct {
	passHook // dials and pipelines pass through
	fired    atomic.Bool
	delay    time.Duration
}

func (h *slowFirstAcquire) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if isScript(cmd) && err == nil && h.fired.CompareAndSwap(false, true) {
			time.Sleep(h.delay)
		}
		return err
	}
}

// A waiting Acquire whose attempt came back with too little of its ttl
// left (the lock is released, not handed out) attempts again as it
// should, and takes the lock once the network is quick: on the attempt
// path of a key with a brace but no hash tag, and of a Redlock.
func TestAWaiterTriesAgainAfterASlowReply(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		key     string
		redlock bool
	}{{"brace key", "lock:{slow", false}, {"redlock", "lock:slow", true}} {
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
	m, err := padlock.New(e.rdb).AcquireMany(ctx, []string{a, "{o}:b:" + e.key}, time.Minute)
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
		l, err := padlock.New(e.rdb).Acquire(e.ctx, e.key, time.Minute, padlock.WithFencing())
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
