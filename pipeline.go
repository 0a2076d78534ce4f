package padlock

import (
	"context"
	"slices"
	"sync"

	"github.com/padlock-go/padlock/driver"
)

// Pipelining: the scripts that many goroutines run at once on one node go
// to it together. A call that finds fewer than pipelineDepth calls in
// flight to its node is sent at once, alone (on a goroutine of its own if
// its context can end: see inflight.go): a lone caller, or a few, wait for
// nobody. Calls that come while that many are in flight wait, and go
// together in one Batch once one is back: one write and one read for them
// all, on both sides, rather than one each; those that come meanwhile go
// in the next. No timer, and no goroutine while nothing waits.
//
// A batch is a pipeline, not a transaction: each script in it runs as it
// would alone, and a batch lost to a blip is a lost reply for each of its
// calls, which padlock handles as it does a lone call's. Every driver
// takes this path: bench/ measured rueidis's own pipelining (commands that
// come while a write is in flight go in the next write) with 256
// goroutines at 1.6 times the go-redis floor's cycles, and 2.3 times with
// padlock's batches on top.

// pipelineDepth is how many calls or batches may be in flight to one node
// before calls wait to go together. bench/ measured it on 2 cores: with
// one, 8 goroutines make half the cycles they make alone (each batch
// waits for the last, and the server idles meanwhile); with 8, they go
// alone as before, and 64 or 256 goroutines make about twice the cycles
// they made without batches.
const pipelineDepth = 8

// A pipeline is what a Client's scripts of one lock go through: its
// Driver, and a lane per node of the calls in flight to it.
type pipeline struct {
	d      driver.Driver
	router driver.Router // d's, if it routes keys to several nodes; else nil
	lane   lane          // the one node's, without router
	lanes  sync.Map      // node name → *lane, with router
}

// newPipeline returns the pipeline of d.
func newPipeline(d driver.Driver) *pipeline {
	p := &pipeline{d: d}
	p.router, _ = d.(driver.Router)
	return p
}

// A lane is one node's calls: how many calls and batches are in flight,
// and the calls that wait to go in the next batch.
type lane struct {
	mu       sync.Mutex
	inFlight int
	next     []*call
}

// Do runs the command args on key's node: EVALSHA through the node's lane,
// anything else straight on the Driver. It blocks until the reply is in or
// ctx ends: it returns ctx's error then, an *unfinishedError if the call
// had gone to Redis (see inflight.go).
func (p *pipeline) Do(ctx context.Context, key string, args ...any) (any, error) {
	if args[0] != "evalsha" {
		return bounded{p.d}.Do(ctx, key, args...)
	}
	ln := p.laneOf(ctx, key)
	ln.mu.Lock()
	if ln.inFlight < pipelineDepth {
		ln.inFlight++
		ln.mu.Unlock()
		if ctx.Done() == nil { // it cannot end: no goroutine needed
			reply, err := p.d.Do(ctx, key, args...)
			p.sendNext(ln)
			return reply, err
		}
		if err := ctx.Err(); err != nil {
			p.sendNext(ln)
			return nil, notSentError{err}
		}
		c := newCall(ctx, key, args)
		go p.alone(ln, c)
		return c.wait(ctx)
	}
	c := newCall(ctx, key, args)
	ln.next = append(ln.next, c)
	ln.mu.Unlock()
	select {
	case <-c.done:
		return c.result()
	case <-ctx.Done():
		if !ln.leave(c) {
			c.recycle()
			return nil, notSentError{ctx.Err()}
		}
		return c.wait(ctx) // its batch may not be written yet: see inflight.go
	}
}

// alone sends c by itself, and then what came meanwhile.
func (p *pipeline) alone(ln *lane, c *call) {
	c.answer(p.d.Do(context.WithoutCancel(c.ctx), c.key, c.args...))
	p.sendNext(ln)
}

// laneOf is the lane of key's node.
func (p *pipeline) laneOf(ctx context.Context, key string) *lane {
	if p.router == nil {
		return &p.lane
	}
	node := p.router.Route(ctx, key) // "" if not known: one lane for those
	if ln, ok := p.lanes.Load(node); ok {
		return ln.(*lane)
	}
	ln, _ := p.lanes.LoadOrStore(node, &lane{})
	return ln.(*lane)
}

// leave takes c, whose caller stopped waiting, out of the next batch, if
// it has not gone in one yet, and reports whether it had.
func (ln *lane) leave(c *call) (taken bool) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	i := slices.Index(ln.next, c)
	if i < 0 {
		return true
	}
	ln.next = slices.Delete(ln.next, i, i+1)
	return false
}

// take returns the calls that wait in ln, as a batch, or, with none,
// counts one fewer in flight and returns nil.
func (ln *lane) take() []*call {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	b := ln.next
	if len(b) == 0 {
		ln.inFlight--
		return nil
	}
	ln.next = nil
	return b
}

// sendNext sends, once a call or batch on ln is back, the calls that came
// meanwhile: on a goroutine, which goes on while more come.
func (p *pipeline) sendNext(ln *lane) {
	if b := ln.take(); b != nil {
		go p.drain(ln, b)
	}
}

// drain sends b, and then the batches that come after it, until none
// waits.
func (p *pipeline) drain(ln *lane, b []*call) {
	for ; b != nil; b = ln.take() {
		p.send(b)
	}
}

// send sends b's calls in one Batch (or Do, for one), and hands each its
// reply. The batch's context has the first caller's values (a trace, say)
// and no deadline: a caller leaves when its own context ends (see Do), and
// none fails by another's.
func (p *pipeline) send(b []*call) {
	ctx := context.WithoutCancel(b[0].ctx)
	if len(b) == 1 {
		c := b[0]
		c.answer(p.d.Do(ctx, c.key, c.args...))
		return
	}
	cmds := make([]driver.Cmd, len(b))
	for i, c := range b {
		cmds[i] = driver.Cmd{Key: c.key, Args: c.args}
	}
	p.d.Batch(ctx, cmds)
	for i, c := range b {
		c.answer(cmds[i].Reply, cmds[i].Err)
	}
}
