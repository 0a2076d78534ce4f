package padlock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/faultproxy"
)

// An instance with 40 waiters shuts down as the examples do: Close, then
// the go-redis client's Close. Close has taken its waiters out of Redis
// before it returns, in one round trip, so none of their tickets is left
// in the queue, and the holder's release serves a waiter of another
// Client at once, not after the ttl of a waiter that is gone.
func TestCloseTakesItsWaitersOutOfRedis(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	holder, err := e.c.TryAcquire(e.ctx, e.key, time.Minute)
	require.NoError(t, err)
	// With ContextTimeoutEnabled the departures go through rdb itself (see
	// Close), hooks and all: newer go-redis versions drop the hooks from
	// a WithTimeout client.
	rdb := redis.NewClient(&redis.Options{Addr: e.srv.Addr(), ContextTimeoutEnabled: true})
	trips := &scriptTrips{}
	rdb.AddHook(trips)
	closing := padlock.New(rdb)
	// A waiter that gives up leaves the queue: the leave script is then in
	// this new server's script cache, so the leaves below need no second
	// round trip as EVAL (as they would once another test taught the
	// process the script's digest).
	gaveUp, cancel := context.WithTimeout(e.ctx, 50*time.Millisecond)
	_, err = closing.Acquire(gaveUp, e.key, time.Minute)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	waitFor(t, e, 0)
	const waiters = 40
	var results []<-chan waited
	for range waiters {
		results = append(results, acquireLater(e.ctx, closing, e.key, 30*time.Second))
	}
	waitFor(t, e, waiters)
	other := acquireLater(e.ctx, moreClients(t, e, 1)[0], e.key, time.Minute)
	waitFor(t, e, waiters+1)

	trips.reset()
	require.NoError(t, closing.Close())
	require.NoError(t, rdb.Close())
	for _, r := range results {
		select {
		case w := <-r:
			require.ErrorIs(t, w.err, padlock.ErrClosed)
		case <-time.After(5 * time.Second):
			t.Fatal("a waiter did not return after Close")
		}
	}
	left, err := e.raw.ZCard(e.ctx, queueKey(e.key)).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), left, "only the other Client's ticket is queued")
	// A waiter's own attempt may make a round trip of its own just before
	// Close (its timer): the leaves are one round trip of all 40.
	assert.Contains(t, trips.reset(), waiters, "the leaves, in one round trip")

	released := time.Now()
	require.NoError(t, holder.Release(e.ctx))
	select {
	case w := <-other:
		require.NoError(t, w.err)
		t.Logf("the other Client's waiter was served %v after the release", time.Since(released))
		require.NoError(t, w.l.Release(e.ctx))
	case <-time.After(3 * time.Second): // a departed waiter would hold it for 30s
		t.Fatalf("the other Client's waiter was not served in 3s; the key holds %q", e.get(e.key))
	}
}

// A waiter whose observer's func runs when Close comes is not waited
// for (the func may be what closes the Client): Close takes its ticket out
// of Redis for it, so the holder's release grants it nothing, and the
// waiter returns ErrClosed once its func is done.
func TestCloseLeavesForAWaiterInItsObserver(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	holder, err := moreClients(t, e, 1)[0].TryAcquire(e.ctx, e.key, time.Minute)
	require.NoError(t, err)
	inside, back := make(chan struct{}), make(chan struct{})
	got := acquireLater(e.ctx, e.c, e.key, time.Minute, padlock.WithObserver(&padlock.Observer{
		WaitStart: func(context.Context, string) {
			close(inside)
			<-back
		},
	}))
	<-inside
	require.NoError(t, e.c.Close())
	left, err := e.raw.ZCard(e.ctx, queueKey(e.key)).Result()
	require.NoError(t, err)
	require.Zero(t, left, "its ticket left the queue")
	require.NoError(t, holder.Release(e.ctx))
	require.Empty(t, e.get(e.key), "nobody was granted the lock")
	close(back)
	require.ErrorIs(t, (<-got).err, padlock.ErrClosed)
}

// A waiter that came while a Lock of its Client (one got by waiting)
// held the key is pending: it sends nothing, and that Lock's release
// queues it. If it is in WaitStart when Close comes, Close has nothing to
// leave for it; the holder's release after Close (Release still works)
// must queue it no more, else the key is granted to a waiter that will
// only return ErrClosed, and held by nobody for its ttl.
func TestAReleaseAfterCloseQueuesNoWaiterOfTheClosedClient(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	first, err := moreClients(t, e, 1)[0].TryAcquire(e.ctx, e.key, time.Minute)
	require.NoError(t, err)
	handed := acquireLater(e.ctx, e.c, e.key, time.Minute)
	waitFor(t, e, 1)
	behind := acquireLater(e.ctx, e.c, e.key, time.Minute)
	waitFor(t, e, 2)
	require.NoError(t, first.Release(e.ctx))
	h := <-handed // it got the key by waiting; behind still waits, so the key's queue here stays
	require.NoError(t, h.err)

	inside, back := make(chan struct{}), make(chan struct{})
	pending := acquireLater(e.ctx, e.c, e.key, time.Minute, padlock.WithObserver(&padlock.Observer{
		WaitStart: func(context.Context, string) {
			close(inside)
			<-back
		},
	}))
	<-inside
	require.NoError(t, e.c.Close())
	require.ErrorIs(t, (<-behind).err, padlock.ErrClosed)
	require.NoError(t, h.l.Release(e.ctx))
	require.Empty(t, e.get(e.key), "the release after Close granted the key to a waiter of the closed Client")
	close(back)
	require.ErrorIs(t, (<-pending).err, padlock.ErrClosed)
}

// A WaitStart that panics (a panic that net/http, say, recovers) leaves
// Close's count of the waiters to wait for as it was: Close waits for a
// later waiter to end, and sends its leave in its own pipeline, before the
// caller closes the go-redis client. (Here the waiter's own script, sent
// after Close returned, would be slow.)
func TestAPanicInWaitStartLeavesCloseWaitingForTheOthers(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	panicKey := e.key + ":panic"
	holder := moreClients(t, e, 1)[0]
	for _, key := range []string{e.key, panicKey} {
		_, err := holder.TryAcquire(e.ctx, key, time.Minute)
		require.NoError(t, err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: e.srv.Addr()})
	slow := &slowScripts{d: 300 * time.Millisecond}
	rdb.AddHook(slow)
	closing := padlock.New(rdb)
	panicking := padlock.WithObserver(&padlock.Observer{
		WaitStart: func(context.Context, string) { panic("WaitStart") },
	})
	require.PanicsWithValue(t, "WaitStart", func() { _, _ = closing.Acquire(e.ctx, panicKey, time.Minute, panicking) })
	got := acquireLater(e.ctx, closing, e.key, time.Minute)
	waitFor(t, e, 1)
	slow.on.Store(true)
	require.NoError(t, closing.Close())
	require.NoError(t, rdb.Close())
	require.ErrorIs(t, (<-got).err, padlock.ErrClosed)
	left, err := e.raw.ZCard(e.ctx, queueKey(e.key)).Result()
	require.NoError(t, err)
	require.Zero(t, left, "the waiter's ticket left the queue")
}

// Waiters that cannot queue in Redis (a Redlock's, a key with a brace but
// no hash tag) attempt on their own. Close waits for an attempt in flight
// (here slowed by latency), so each of them returns ErrClosed, not the
// error of a go-redis client closed under it.
func TestCloseWaitsForAttemptsInFlight(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		key   string
		nodes int
	}{
		{"redlock", "lock:close:redlock", 3},
		{"brace", "lock:close:{brace", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clients, raws, proxies := proxiedNodes(t, tt.nodes, tt.nodes)
			for _, r := range raws {
				require.NoError(t, r.Set(t.Context(), tt.key, "another holder", time.Minute).Err())
			}
			c := padlock.NewRedlock(clients)
			if tt.nodes == 1 {
				c = padlock.New(clients[0])
			}
			fast := padlock.WithBackoff(padlock.ExponentialBackoff(time.Millisecond, time.Millisecond))
			var results []<-chan waited
			for range 3 {
				results = append(results, acquireLater(t.Context(), c, tt.key, time.Minute, fast))
			}
			time.Sleep(50 * time.Millisecond) // the head attempts
			for _, p := range proxies {
				p.SetLatency(100 * time.Millisecond)
			}
			time.Sleep(50 * time.Millisecond) // an attempt is slowed on its way
			require.NoError(t, c.Close())
			for _, r := range clients {
				require.NoError(t, r.Close())
			}
			for _, r := range results {
				select {
				case w := <-r:
					require.ErrorIs(t, w.err, padlock.ErrClosed)
				case <-time.After(5 * time.Second):
					t.Fatal("a waiter did not return after Close")
				}
			}
		})
	}
}

// When Redis does not answer (a blackhole: connections stay open, nothing
// comes back), Close gives its waiters and their departures 2s: it
// returns within that and the read timeout of a ticket's renewal that may
// be in flight, whatever go-redis's ReadTimeout (a departure on a
// *redis.Client times out by Close's own bound, even with none), and the
// waiters return ErrClosed, or the error of the round trip they were in.
func TestCloseIsBoundedWhenRedisDoesNotAnswer(t *testing.T) {
	tests := []struct {
		name        string
		readTimeout time.Duration
		inFlight    bool // a waiter's attempt is in flight when Close comes
	}{
		{"no ReadTimeout", -1, false},
		{"departure", 0, false},
		{"departure, ReadTimeout 8s", 8 * time.Second, false},
		{"attempt in flight", 0, true},
	}
	// 2s for Close, 3s (the default ReadTimeout) for a renewal, and slack.
	const within = 7 * time.Second
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.readTimeout != -1 {
				longOnly(t)
			}
			e := newReal(t, nil)
			holdFor := time.Minute
			if tt.inFlight {
				holdFor = 1500 * time.Millisecond
			}
			start := time.Now()
			holder, err := e.c.TryAcquire(e.ctx, e.key, holdFor)
			require.NoError(t, err)
			p, err := faultproxy.Start(e.srv.Addr())
			require.NoError(t, err)
			t.Cleanup(p.Close)
			rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: tt.readTimeout})
			t.Cleanup(func() { _ = rdb.Close() })
			closing := padlock.New(rdb)
			got := acquireLater(e.ctx, closing, e.key, 30*time.Second)
			waitFor(t, e, 1)
			if tt.inFlight {
				time.Sleep(1300*time.Millisecond - time.Since(start))
			}
			p.SetBlackhole(true)
			if tt.inFlight {
				time.Sleep(400 * time.Millisecond) // the waiter attempts as the holder expires
			}

			closed := make(chan time.Duration, 1)
			go func() {
				t0 := time.Now()
				_ = closing.Close()
				closed <- time.Since(t0)
			}()
			select {
			case took := <-closed:
				t.Logf("Close took %v", took)
			case <-time.After(within):
				_ = rdb.Close() // lets Close return
				<-closed
				t.Errorf("Close did not return in %v", within)
			}
			_ = rdb.Close() // as Close's caller does
			if tt.readTimeout == -1 {
				// With no read timeout, a round trip in flight ends only
				// when its connection drops: newer go-redis versions'
				// Close does not drop a connection in use.
				p.CutAll()
			}
			select {
			case w := <-got:
				t.Logf("the waiter returned %v", w.err)
				require.Error(t, w.err)
			case <-time.After(5 * time.Second):
				t.Fatal("the waiter did not return once the go-redis client was closed")
			}
			_ = holder.Release(e.ctx)
		})
	}
}

// slowScripts delays every script sent alone by d once on.
type slowScripts struct {
	passHook
	d  time.Duration
	on atomic.Bool
}

func (s *slowScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if s.on.Load() && isScript(cmd) {
			time.Sleep(s.d)
		}
		return next(ctx, cmd)
	}
}

// scriptTrips is a hook that counts the scripts of each round trip that
// has any.
type scriptTrips struct {
	passHook
	mu    sync.Mutex
	trips []int
}

func (s *scriptTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.count([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (s *scriptTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		s.count(cmds)
		return next(ctx, cmds)
	}
}

func (s *scriptTrips) count(cmds []redis.Cmder) {
	n := 0
	for _, cmd := range cmds {
		if isScript(cmd) {
			n++
		}
	}
	if n > 0 {
		s.mu.Lock()
		s.trips = append(s.trips, n)
		s.mu.Unlock()
	}
}

// reset returns the counts so far, and starts again.
func (s *scriptTrips) reset() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	trips := s.trips
	s.trips = nil
	return trips
}

// Two Close calls at once (a signal handler's and a deferred one): each
// returns only once the waiters' tickets are out of Redis, so that its
// caller may close the go-redis client. Here the leaves' pipeline is slow.
func TestConcurrentClosesWaitForTheDeparture(t *testing.T) {
	e := newReal(t, nil)
	holder, err := e.c.TryAcquire(e.ctx, e.key, time.Minute)
	require.NoError(t, err)
	rdb := redis.NewClient(&redis.Options{Addr: e.srv.Addr()})
	slow := &slowPipelines{d: 300 * time.Millisecond}
	rdb.AddHook(slow)
	closing := padlock.New(rdb)
	const waiters = 10
	var results []<-chan waited
	for range waiters {
		results = append(results, acquireLater(e.ctx, closing, e.key, 30*time.Second))
	}
	waitFor(t, e, waiters)
	slow.on.Store(true)

	returned := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			assert.NoError(t, closing.Close())
			returned <- struct{}{}
		})
	}
	<-returned
	queued, err := e.raw.ZCard(e.ctx, queueKey(e.key)).Result()
	require.NoError(t, err)
	require.NoError(t, rdb.Close()) // as the first Close's caller does
	wg.Wait()
	for _, r := range results {
		require.ErrorIs(t, (<-r).err, padlock.ErrClosed)
	}
	require.Zero(t, queued, "a Close returned with its waiters' tickets still queued")
	require.NoError(t, holder.Release(e.ctx))
}

// slowPipelines delays every pipeline by d once on, as a pool that must
// dial, or a busy client, would.
type slowPipelines struct {
	passHook
	d  time.Duration
	on atomic.Bool
}

func (s *slowPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (s *slowPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if s.on.Load() {
			time.Sleep(s.d)
		}
		return next(ctx, cmds)
	}
}
