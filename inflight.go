package padlock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/padlock-go/padlock/driver"
)

// Calls in flight: a caller waits for Redis until its context ends, and
// not longer, whatever the Redis client does. A client may ignore a
// context's deadline (go-redis reads until its ReadTimeout, 3s, and tries
// again), or honour it and still send the command later (rueidis and
// valkey-go return when the context ends but keep the command queued on a
// connection). So a call whose context can end runs on a goroutine of its
// own, on a context with the caller's values but not its cancellation, and
// the caller waits for the reply or its context, whichever comes first.
//
// A caller that leaves gets an *unfinishedError: its command may still
// run. What it does next that must come after the command (an undo of an
// acquire, a waiter's leave) waits for the error's done, in the
// background (see Client.after), so that it cannot overtake the command.
// The call itself ends when the Redis client returns: by its own
// timeouts, or when its owner closes it.

// A call is one command, or script, and its reply: sent by a goroutine of
// its own (Client.d's Do, a lone script of the pipeline) or in a batch (the
// pipeline's), and waited for by its caller until its context ends.
type call struct {
	ctx   context.Context
	key   string
	args  []any
	reply any
	err   error
	done  chan struct{} // one value, once the reply is in and the caller waits
	state atomic.Int32  // callWaited, callAnswered or callLeft
	left  chan struct{} // closed once the reply is in, if the caller left first
}

// A call's states.
const (
	callWaited   int32 = iota // the reply is not in, and the caller waits for it
	callAnswered              // the reply is in, for the caller
	callLeft                  // the caller left before the reply came
)

// calls are the calls that finished, for the next (see newCall).
var calls = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// newCall returns a call of args on key's node, for a caller with ctx.
func newCall(ctx context.Context, key string, args []any) *call {
	c := calls.Get().(*call)
	c.ctx, c.key, c.args = ctx, key, args
	return c
}

// recycle puts c back for another newCall.
func (c *call) recycle() {
	*c = call{done: c.done}
	calls.Put(c)
}

// answer hands c its reply: to its caller if it waits, else to nobody,
// telling whoever waits for the command to end (see unfinishedError). c is
// not to be touched after.
func (c *call) answer(reply any, err error) {
	c.reply, c.err = reply, err
	if c.state.CompareAndSwap(callWaited, callAnswered) {
		c.done <- struct{}{}
		return
	}
	close(c.left)
	c.recycle()
}

// wait waits for c's reply until ctx ends, and returns it; or, if ctx
// ends first, an *unfinishedError with ctx's error. c is not to be touched
// after.
func (c *call) wait(ctx context.Context) (any, error) {
	select {
	case <-c.done:
	case <-ctx.Done():
		left := make(chan struct{})
		c.left = left // before the swap: answer reads it after
		if c.state.CompareAndSwap(callWaited, callLeft) {
			// c is answer's now: not to be touched.
			return nil, &unfinishedError{err: ctx.Err(), done: left}
		}
		<-c.done // the reply came as ctx ended
	}
	return c.result()
}

// result returns c's reply, once its done had its value. c is not to be
// touched after.
func (c *call) result() (any, error) {
	reply, err := c.reply, c.err
	c.recycle()
	return reply, err
}

// An unfinishedError is the error of a call whose caller's context ended
// while the call was in flight: Redis may still run its command. done is
// closed once the Redis client is done with it.
type unfinishedError struct {
	err  error // the context's
	done <-chan struct{}
}

func (e *unfinishedError) Error() string { return e.err.Error() }
func (e *unfinishedError) Unwrap() error { return e.err }

// A notSentError is the error of a call whose caller's context ended
// before the call went to Redis: nothing of it runs.
type notSentError struct{ err error }

func (e notSentError) Error() string { return e.err.Error() }
func (e notSentError) Unwrap() error { return e.err }

// notSent reports whether err is that of a call that never went to Redis.
func notSent(err error) bool {
	var n notSentError
	return errors.As(err, &n)
}

// unfinished returns, if err is that of a call its caller left in flight,
// a channel closed once the call is done; else nil.
func unfinished(err error) <-chan struct{} {
	var u *unfinishedError
	if errors.As(err, &u) {
		return u.done
	}
	return nil
}

// after runs f once the call that failed with err is done: at once, on
// the caller's goroutine, unless err is that of a call its caller left in
// flight; then on a goroutine of its own once the call is done, so that f
// does not overtake the command, and the caller returns by its deadline.
// There f gets a context with ctx's values but not its cancellation, and
// Close waits for it (within its 2s).
func (c *Client) after(ctx context.Context, err error, f func(context.Context)) {
	done := unfinished(err)
	if done == nil {
		f(ctx)
		return
	}
	ctx = context.WithoutCancel(ctx)
	c.background(func() {
		<-done
		f(ctx)
	})
}

// background runs f on a goroutine of its own, which Close waits for
// (within its 2s): follow-ups of calls, after their callers returned.
func (c *Client) background(f func()) {
	tracked := c.late.add(1)
	go func() {
		if tracked {
			defer c.late.done()
		}
		f()
	}()
}

// bounded is a Driver whose calls return when their context ends (see
// above). A Client talks to Redis through it; its pipeline, which sends
// scripts on goroutines of its own, through the Driver it wraps.
type bounded struct{ driver.Driver }

// bound returns d bounded, if it is not yet.
func bound(d driver.Driver) driver.Driver {
	if _, ok := d.(bounded); ok {
		return d
	}
	return bounded{d}
}

// Do is the Driver's Do, on a goroutine of its own if ctx can end.
func (b bounded) Do(ctx context.Context, key string, args ...any) (any, error) {
	if ctx.Done() == nil {
		return b.Driver.Do(ctx, key, args...)
	}
	if err := ctx.Err(); err != nil {
		return nil, notSentError{err}
	}
	c := newCall(ctx, key, args)
	go b.run(c)
	return c.wait(ctx)
}

func (b bounded) run(c *call) {
	c.answer(b.Driver.Do(context.WithoutCancel(c.ctx), c.key, c.args...))
}

// Batch is the Driver's Batch, on a goroutine of its own if ctx can end:
// the commands not answered when ctx ends get an *unfinishedError.
func (b bounded) Batch(ctx context.Context, cmds []driver.Cmd) {
	if ctx.Done() == nil {
		b.Driver.Batch(ctx, cmds)
		return
	}
	if err := ctx.Err(); err != nil {
		for i := range cmds {
			cmds[i].Err = notSentError{err}
		}
		return
	}
	own := slices.Clone(cmds) // the goroutine's, until it is done
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.Driver.Batch(context.WithoutCancel(ctx), own)
	}()
	select {
	case <-done:
		copy(cmds, own)
	case <-ctx.Done():
		err := &unfinishedError{err: ctx.Err(), done: done}
		for i := range cmds {
			cmds[i].Reply, cmds[i].Err = nil, err
		}
	}
}

// Pin is the Driver's Pin, on a goroutine of its own if ctx can end; its
// connection's calls are bounded too. A connection that comes after its
// caller left is closed.
func (b bounded) Pin(ctx context.Context, key string) (driver.Conn, error) {
	conn, err := within(ctx, func(ctx context.Context) (driver.Conn, error) {
		return b.Driver.Pin(ctx, key)
	}, func(conn driver.Conn) { _ = conn.Close() })
	if err != nil {
		return nil, err
	}
	return &boundedConn{conn: conn}, nil
}

// Nodes is the Driver's Nodes, on a goroutine of its own if ctx can end;
// each node's Driver is bounded too.
func (b bounded) Nodes(ctx context.Context) ([]driver.Node, error) {
	nodes, err := within(ctx, b.Driver.Nodes, nil)
	for i := range nodes {
		nodes[i].Driver = bounded{nodes[i].Driver}
	}
	return nodes, err
}

// Protocol is the wrapped Driver's, or 3 if it does not say (see
// driver.Protocoler).
func (b bounded) Protocol() int {
	if p, ok := b.Driver.(driver.Protocoler); ok {
		return p.Protocol()
	}
	return 3
}

// within runs f on a goroutine of its own, with ctx's values but not its
// cancellation, and returns its result, or, once ctx ends first, an
// *unfinishedError; a result that comes after that is dropped (if drop is
// not nil).
// If ctx cannot end, f runs on the caller's goroutine.
func within[T any](ctx context.Context, f func(context.Context) (T, error), drop func(T)) (T, error) {
	if ctx.Done() == nil {
		return f(ctx)
	}
	type result struct {
		v   T
		err error
	}
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, notSentError{err}
	}
	res := make(chan result, 1)
	finished := make(chan struct{})
	var state atomic.Int32 // callWaited, callAnswered or callLeft
	go func() {
		defer close(finished)
		v, err := f(context.WithoutCancel(ctx))
		if state.CompareAndSwap(callWaited, callAnswered) {
			res <- result{v, err}
		} else if err == nil && drop != nil {
			drop(v)
		}
	}()
	select {
	case r := <-res:
		return r.v, r.err
	case <-ctx.Done():
		if state.CompareAndSwap(callWaited, callLeft) {
			return zero, &unfinishedError{err: ctx.Err(), done: finished}
		}
		r := <-res // it came as ctx ended
		return r.v, r.err
	}
}

// A boundedConn is a pinned connection whose calls return when their
// context ends (see bounded). A call left in flight keeps the connection
// busy: the next call waits for it, and Close closes the connection once
// it is done.
type boundedConn struct {
	conn driver.Conn
	busy <-chan struct{} // closed once the call left in flight is done; nil if none
}

// Do is the connection's Do, bounded by ctx.
func (bc *boundedConn) Do(ctx context.Context, args ...any) (any, error) {
	if bc.busy != nil {
		select {
		case <-bc.busy:
			bc.busy = nil
		case <-ctx.Done():
			return nil, notSentError{ctx.Err()}
		}
	}
	if ctx.Done() == nil {
		return bc.conn.Do(ctx, args...)
	}
	c := newCall(ctx, "", args)
	go func() { c.answer(bc.conn.Do(context.WithoutCancel(c.ctx), c.args...)) }()
	reply, err := c.wait(ctx)
	bc.busy = unfinished(err)
	return reply, err
}

// Close closes the connection, at once or once the call left in flight
// is done.
func (bc *boundedConn) Close() error {
	if busy := bc.busy; busy != nil {
		go func() {
			<-busy
			_ = bc.conn.Close()
		}()
		return nil
	}
	return bc.conn.Close()
}
