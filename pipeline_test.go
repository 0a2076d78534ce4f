package padlock_test

import (
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/driver"
)

// cycles runs goroutines goroutines that each take and release a key of
// their own rounds times, all starting at once, and fails t on an error.
func cycles(t *testing.T, c *padlock.Client, key string, goroutines, rounds int) {
	t.Helper()
	ctx := t.Context()
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			<-start
			for range rounds {
				l, err := c.TryAcquire(ctx, key+":"+strconv.Itoa(g), 10*time.Second)
				if !assert.NoError(t, err) {
					return
				}
				assert.NoError(t, l.Release(ctx))
			}
		})
	}
	close(start)
	wg.Wait()
}

// The scripts of many goroutines go to Redis together: fewer round trips
// than scripts, and every lock taken and released as alone.
func TestManyGoroutinesShareRoundTrips(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		d := &outside{Driver: padlock.GoRedisDriver(e.rdb)}
		c := padlock.NewDriver(d)
		defer c.Close()
		const goroutines, rounds = 64, 20
		cycles(t, c, e.key, goroutines, rounds)
		scripts := int32(2 * goroutines * rounds)
		assert.Positive(t, d.batches.Load(), "scripts went together")
		assert.Less(t, d.dos.Load()+d.batches.Load(), scripts, "fewer round trips than scripts")
		n, err := e.raw.Keys(e.ctx, e.key+"*").Result()
		require.NoError(t, err)
		assert.Empty(t, n, "every lock was released")
	})
}

// A lone caller, or as many as PipelineDepth, wait for nobody: each script
// goes at once, in a round trip of its own.
func TestFewGoroutinesGoAtOnce(t *testing.T) {
	t.Parallel()
	e := newMini(t)
	for _, goroutines := range []int{1, padlock.PipelineDepth} {
		d := &outside{Driver: padlock.GoRedisDriver(e.rdb)}
		c := padlock.NewDriver(d)
		cycles(t, c, e.key, goroutines, 30)
		c.Close()
		assert.Zero(t, d.batches.Load(), "%d goroutines", goroutines)
		assert.GreaterOrEqual(t, d.dos.Load(), int32(2*30*goroutines), "%d goroutines", goroutines)
	}
}

// lossy is a Driver whose first Batch of more than one command, once armed,
// runs and then loses the replies of the commands that ran, as a
// connection that drops after the write. (An error reply, as NOSCRIPT
// from a server that has not seen a script yet, says the command did not
// run: it is kept.)
type lossy struct {
	driver.Driver
	armed, lost atomic.Bool
	mu          sync.Mutex // one Batch loses at a time
	replies     int        // the replies it lost (under mu)
}

func (d *lossy) Batch(ctx context.Context, cmds []driver.Cmd) {
	d.Driver.Batch(ctx, cmds)
	if len(cmds) < 2 || !d.armed.Load() || d.lost.Load() {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lost.Load() {
		return
	}
	for i := range cmds {
		if cmds[i].Err == nil {
			cmds[i].Reply, cmds[i].Err = nil, &net.OpError{Op: "read", Net: "tcp", Err: io.ErrUnexpectedEOF}
			d.replies++
			d.lost.Store(true)
		}
	}
}

// A batch lost after it ran is a lost reply for each of its calls: each
// TryAcquire in it reports the error and leaves no lock held, and each
// Release in it reports the error (its script ran: the lock is gone).
func TestALostBatchLeavesNoLockHeld(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, e *env) {
		d := &lossy{Driver: padlock.GoRedisDriver(e.rdb)}
		c := padlock.NewDriver(d)
		defer c.Close()
		const goroutines = 64
		failed := 0
		for round := 0; round < 20 && !d.lost.Load(); round++ {
			d.armed.Store(true)
			start := make(chan struct{})
			var wg sync.WaitGroup
			var mu sync.Mutex
			for g := range goroutines {
				wg.Go(func() {
					<-start
					l, err := c.TryAcquire(e.ctx, e.key+":"+strconv.Itoa(g), 10*time.Second)
					if err != nil {
						assert.NotErrorIs(t, err, padlock.ErrNotAcquired)
						mu.Lock()
						failed++
						mu.Unlock()
						return
					}
					if err := l.Release(e.ctx); err != nil {
						assert.NotErrorIs(t, err, padlock.ErrNotHeld)
						mu.Lock()
						failed++
						mu.Unlock()
					}
				})
			}
			close(start)
			wg.Wait()
		}
		require.True(t, d.lost.Load(), "a batch of TryAcquires was lost")
		d.mu.Lock()
		assert.Equal(t, d.replies, failed, "each call whose reply was lost reported it")
		d.mu.Unlock()
		n, err := e.raw.Keys(e.ctx, e.key+"*").Result()
		require.NoError(t, err)
		assert.Empty(t, n, "no lock is left held")
	})
}

// gated is a Driver whose scripts on keys that begin with slow wait until
// open is closed; it records every key a script went to.
type gated struct {
	driver.Driver
	slow    string
	open    chan struct{}
	waiting atomic.Int32
	mu      sync.Mutex
	keys    []string
}

func (d *gated) Do(ctx context.Context, key string, args ...any) (any, error) {
	d.saw(key)
	if strings.HasPrefix(key, d.slow) {
		d.waiting.Add(1)
		<-d.open
	}
	return d.Driver.Do(ctx, key, args...)
}

func (d *gated) Batch(ctx context.Context, cmds []driver.Cmd) {
	for _, c := range cmds {
		d.saw(c.Key)
	}
	d.Driver.Batch(ctx, cmds)
}

func (d *gated) saw(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.keys = append(d.keys, key)
}

func (d *gated) sent(key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range d.keys {
		if k == key {
			return true
		}
	}
	return false
}

// holdUp starts PipelineDepth TryAcquires on slow keys of d, and waits
// until each waits in d; they go on once d.open is closed. The returned
// func waits for them.
func holdUp(t *testing.T, c *padlock.Client, d *gated) (wait func()) {
	// One cycle first, so that the scripts' digests are known: the slow
	// ones wait in their EVALSHA, not in a SCRIPT LOAD.
	l, err := c.TryAcquire(t.Context(), "warm:"+d.slow, time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(t.Context()))
	var wg sync.WaitGroup
	for i := range padlock.PipelineDepth {
		wg.Go(func() {
			l, err := c.TryAcquire(context.Background(), d.slow+strconv.Itoa(i), 10*time.Second)
			if assert.NoError(t, err) {
				assert.NoError(t, l.Release(context.Background()))
			}
		})
	}
	require.Eventually(t, func() bool { return d.waiting.Load() == padlock.PipelineDepth }, 5*time.Second, time.Millisecond)
	return wg.Wait
}

// A caller that leaves while its script waits for a batch takes it out:
// it is never sent, and holds nothing.
func TestACallerThatLeavesIsNotSent(t *testing.T) {
	t.Parallel()
	e := newMini(t)
	d := &gated{Driver: padlock.GoRedisDriver(e.rdb), slow: e.key + ":slow:", open: make(chan struct{})}
	c := padlock.NewDriver(d)
	defer c.Close()
	wait := holdUp(t, c, d)
	ctx, cancel := context.WithTimeout(e.ctx, 50*time.Millisecond)
	defer cancel()
	_, err := c.TryAcquire(ctx, e.key, 10*time.Second)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	close(d.open)
	wait()
	assert.False(t, d.sent(e.key), "the script that waited was never sent")
	assert.False(t, e.mr.Exists(e.key))
	l, err := c.TryAcquire(e.ctx, e.key, 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(e.ctx))
}

// routed is gated, on a Cluster's nodes: keys that begin with slow are
// one node's, the others another's.
type routed struct{ *gated }

func (d routed) Route(_ context.Context, key string) string {
	if strings.HasPrefix(key, d.slow) {
		return "slow:6379"
	}
	return "fast:6379"
}

// With a driver.Router, what waits for one node holds up no other's: a
// script to an idle node goes at once.
func TestABusyNodeHoldsUpNoOther(t *testing.T) {
	t.Parallel()
	e := newMini(t)
	g := &gated{Driver: padlock.GoRedisDriver(e.rdb), slow: e.key + ":slow:", open: make(chan struct{})}
	for _, tt := range []struct {
		name   string
		d      driver.Driver
		router bool
	}{{"router", routed{g}, true}, {"no router", g, false}} {
		t.Run(tt.name, func(t *testing.T) {
			g.waiting.Store(0)
			g.open = make(chan struct{})
			c := padlock.NewDriver(tt.d)
			defer c.Close()
			wait := holdUp(t, c, g)
			defer wait()
			defer close(g.open)
			ctx, cancel := context.WithTimeout(e.ctx, 300*time.Millisecond)
			defer cancel()
			l, err := c.TryAcquire(ctx, e.key, 10*time.Second)
			if !tt.router {
				require.ErrorIs(t, err, context.DeadlineExceeded, "one count for every node: the call waits")
				return
			}
			require.NoError(t, err)
			require.NoError(t, l.Release(e.ctx))
		})
	}
}

// stalling is gated, whose first script on the key stall waits until
// resume is closed, once it has told stalled.
type stalling struct {
	*gated
	stall           string
	once            sync.Once
	stalled, resume chan struct{}
}

func (d *stalling) Do(ctx context.Context, key string, args ...any) (any, error) {
	if key == d.stall {
		first := false
		d.once.Do(func() { first = true })
		if first {
			close(d.stalled)
			<-d.resume
		}
	}
	return d.gated.Do(ctx, key, args...)
}

// A caller whose ctx ends once its script went in a batch returns at once,
// and its undo comes after the script: it does not overtake it, which would
// leave the key held by nobody.
func TestACallerThatLeavesASentBatchIsUndoneAfterIt(t *testing.T) {
	t.Parallel()
	e := newMini(t)
	g := &gated{Driver: padlock.GoRedisDriver(e.rdb), slow: e.key + ":slow:", open: make(chan struct{})}
	d := &stalling{gated: g, stall: e.key, stalled: make(chan struct{}), resume: make(chan struct{})}
	c := padlock.NewDriver(d)
	defer c.Close()
	wait := holdUp(t, c, g)
	ctx, cancel := context.WithCancel(e.ctx)
	type result struct {
		l   *padlock.Lock
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := c.TryAcquire(ctx, e.key, 10*time.Second)
		done <- result{l, err}
	}()
	// The 8 in flight come back; the one that waited goes (alone, as Do)
	// and stalls on its way.
	require.Eventually(t, func() bool { return padlock.PipelineWaiting(c) == 1 }, 5*time.Second, time.Millisecond)
	close(g.open)
	wait()
	select {
	case <-d.stalled:
	case <-time.After(5 * time.Second):
		t.Fatal("the script that waited was not sent")
	}
	cancel()
	select {
	case r := <-done:
		require.ErrorIs(t, r.err, context.Canceled, "it returns as its ctx ends")
	case <-time.After(5 * time.Second):
		t.Fatal("TryAcquire did not return when its ctx ended")
	}
	assert.False(t, e.mr.Exists(e.key), "the script has not run yet")
	close(d.resume) // the script runs now, and takes the key; its undo comes after
	assert.Eventually(t, func() bool { return !e.mr.Exists(e.key) }, 5*time.Second, time.Millisecond,
		"the key is not left held")
}
