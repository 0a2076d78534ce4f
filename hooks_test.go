package padlock_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock"
)

// The go-redis hooks the tests put between padlock and Redis, to count
// its commands or to make a fault happen at a chosen command.

// passHook is the part of a go-redis hook that lets dials and pipelines
// through: a test hook embeds it and adds its ProcessHook.
type passHook struct{}

func (passHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (passHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// replay is a hook that runs the first successful script call twice, as a
// server sees a command that a client retried after losing its reply.
type replay struct {
	passHook // dials and pipelines pass through
	mu       sync.Mutex
	done     bool
}

func (r *replay) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := next(ctx, cmd); err != nil || !isScript(cmd) || !r.first() {
			return err
		}
		return next(ctx, cmd)
	}
}

// lostReply is a hook that runs the first successful script call, then
// reports a network error instead of its reply.
type lostReply struct {
	passHook // dials and pipelines pass through
	replay
}

func (r *lostReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := next(ctx, cmd); err != nil || !isScript(cmd) || !r.first() {
			return err
		}
		cmd.SetErr(errLostReply)
		return errLostReply
	}
}

// ctxMark is a context value that Release must pass on to Redis calls.
type ctxMark struct{}

// markSeen is a go-redis hook that records whether the commands it sees
// carry ctxMark in their context, and whether that context was done.
type markSeen struct {
	passHook    // dials and pipelines pass through
	mu          sync.Mutex
	marked, all int
	done        int
}

func (m *markSeen) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		m.mu.Lock()
		m.all++
		if ctx.Value(ctxMark{}) != nil {
			m.marked++
		}
		if ctx.Err() != nil {
			m.done++
		}
		m.mu.Unlock()
		return next(ctx, cmd)
	}
}

// releaseCounter counts release scripts that Redis answered.
type releaseCounter struct {
	passHook // dials and pipelines pass through
	mu       sync.Mutex
	n        int
}

func (r *releaseCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if args := cmd.Args(); len(args) > 1 && args[1] == padlock.ReleaseScriptSHA() && err == nil {
			r.mu.Lock()
			r.n++
			r.mu.Unlock()
		}
		return err
	}
}

// cancelOnAcquire is a hook that, when an acquire script succeeds, cancels
// the caller's context and reports the cancellation instead of the reply.
type cancelOnAcquire struct {
	passHook // dials and pipelines pass through
	cancel   context.CancelFunc
	fired    atomic.Bool
}

func (h *cancelOnAcquire) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		c, ok := cmd.(*redis.Cmd)
		if err != nil || !ok || !isScript(cmd) {
			return err
		}
		if acquired(c) && h.fired.CompareAndSwap(false, true) {
			h.cancel()
			cmd.SetErr(context.Canceled)
			return context.Canceled
		}
		return err
	}
}

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

// lateFirstScript is a go-redis hook that, once armed, has the first
// script call (an acquire, in the test) reach Redis only after delay, as
// a command already on a slow network would, whatever happens to its
// context meanwhile; it closes landed once Redis has answered it. It is
// added to a client before its first call and armed later: a client's
// hooks are not to change while it runs a command.
type lateFirstScript struct {
	passHook // dials and pipelines pass through
	armed    atomic.Bool
	delay    time.Duration
	landed   chan struct{}
}

func (h *lateFirstScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isScript(cmd) || !h.armed.CompareAndSwap(true, false) {
			return next(ctx, cmd)
		}
		time.Sleep(h.delay)
		defer close(h.landed)
		return next(context.WithoutCancel(ctx), cmd)
	}
}

// counter is a go-redis hook that counts round trips (a pipeline is one)
// and the commands sent.
type counter struct {
	passHook // dials and pipelines pass through
	mu       sync.Mutex
	trips    int
	cmds     []string
}

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.mu.Lock()
		c.trips++
		c.cmds = append(c.cmds, cmd.Name())
		c.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.mu.Lock()
		c.trips++
		for _, cmd := range cmds {
			c.cmds = append(c.cmds, cmd.Name())
		}
		c.mu.Unlock()
		return next(ctx, cmds)
	}
}

// reset zeroes the counts and returns what they were.
func (c *counter) reset() (trips int, cmds []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	trips, cmds = c.trips, c.cmds
	c.trips, c.cmds = 0, nil
	return trips, cmds
}

// acquired reports whether an acquire script's reply means the lock was
// taken: a fence >= 0 from the single attempt, {1, fence} from a waiting one.
func acquired(c *redis.Cmd) bool {
	if v, err := c.Slice(); err == nil {
		return len(v) > 0 && v[0] == int64(1)
	}
	n, err := c.Int64()
	return err == nil && n >= 0
}
