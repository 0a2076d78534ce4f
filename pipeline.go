package padlock

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/padlock-go/padlock/driver"
)

// Pipelining: the scripts that many goroutines run at once on one node go
// to it together. A call that finds fewer than pipelineDepth calls in
// flight to its node is sent at once, alone, on the caller's goroutine: a
// lone caller, or a few, wait for nobody. Calls that come while that many
// are in flight wait, and go together in one Batch once one is back: one
// write and one read for them all, on both sides, rather than one each;
// those that come meanwhile go in the next. No timer, and no goroutine
// while nothing waits.
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

// A call is one script that waits for a batch, and once done has a value,
// its reply.
type call struct {
	ctx   context.Context
	key   string
	args  []any
	reply any
	err   error
	done  chan struct{} // one value, once the reply is in
}

// calls are the calls that finished, for the next (see Do).
var calls = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// Do runs the command args on key's node: EVALSHA through the node's lane,
// anything else straight on the Driver. It blocks until the reply is in or
// ctx ends: it returns ctx's error then if the call was not sent yet, or
// else waits for the reply.
func (p *pipeline) Do(ctx context.Context, key string, args ...any) (any, error) {
	if args[0] != "evalsha" {
		return p.d.Do(ctx, key, args...)
	}
	ln := p.laneOf(ctx, key)
	ln.mu.Lock()
	if ln.inFlight < pipelineDepth {
		ln.inFlight++
		ln.mu.Unlock()
		reply, err := p.d.Do(ctx, key, args...)
		p.sendNext(ln)
		return reply, err
	}
	c := calls.Get().(*call)
	c.ctx, c.key, c.args = ctx, key, args
	ln.next = append(ln.next, c)
	ln.mu.Unlock()
	select {
	case <-c.done:
	case <-ctx.Done():
		if !ln.leave(c) {
			return nil, ctx.Err() // never sent
		}
		// It went in a batch, which may not be written yet: what the
		// caller does next (an undo) must not overtake it. It waits for
		// the reply, as a lone go-redis call waits for its read; the
		// batch ends by the latest of its callers' deadlines (see send).
		<-c.done
	}
	reply, err := c.reply, c.err
	*c = call{done: c.done}
	calls.Put(c)
	return reply, err
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
// reply. The batch's context has the first caller's values (a trace, say),
// and the latest of its callers' deadlines (none if one has none): a
// caller that leaves does not end it (see Do), and none fails by another's
// deadline.
func (p *pipeline) send(b []*call) {
	ctx, cancel := batchContext(b)
	defer cancel()
	if len(b) == 1 {
		c := b[0]
		c.reply, c.err = p.d.Do(ctx, c.key, c.args...)
		c.done <- struct{}{}
		return
	}
	cmds := make([]driver.Cmd, len(b))
	for i, c := range b {
		cmds[i] = driver.Cmd{Key: c.key, Args: c.args}
	}
	p.d.Batch(ctx, cmds)
	for i, c := range b {
		c.reply, c.err = cmds[i].Reply, cmds[i].Err
		c.done <- struct{}{}
	}
}

// batchContext is the context of the batch b (see send).
func batchContext(b []*call) (context.Context, context.CancelFunc) {
	ctx := context.WithoutCancel(b[0].ctx)
	var last time.Time
	for _, c := range b {
		d, ok := c.ctx.Deadline()
		if !ok {
			return ctx, func() {}
		}
		if d.After(last) {
			last = d
		}
	}
	return context.WithDeadline(ctx, last)
}
