package padlockrueidis

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/padlock-go/padlock/driver"
	"github.com/redis/rueidis"
)

// A conn is a connection of rueidis's own (Dedicate) that carries
// padlock's pub/sub, its tracking, or both: RESP3 delivers messages and
// invalidations on the connection itself, so a node whose waiters are
// both notified and watched costs one connection, and one keep-alive PING
// a second (rueidis's, on an idle connection), rather than two.
//
// Each user leaves it with Close, and the last one closes it. A pub/sub
// user that leaves it to tracking unsubscribes its channels first; should
// that fail, their messages go nowhere, or to the next pub/sub user, for
// whom they are hints like any other.
type conn struct {
	shares *shares // where it is found by address; nil for one of its own
	addr   string
	dc     rueidis.DedicatedClient
	give   func()
	ended  <-chan error  // rueidis's: the connection's end
	gone   chan struct{} // closed once the connection is lost or closed
	err    error         // why, set before gone is closed
	closed sync.Once

	mu      sync.Mutex
	ps      *pubsub        // the pub/sub user, or nil
	inv     func([]string) // the tracking user's, or nil
	closing bool           // lost, or closed: nobody joins it
}

// shares are the conns of a driver and its Nodes' drivers, by the address
// of the one node each is to. m is made with the driver: a conn may be
// lost, and forgotten, before dedicate lists it.
type shares struct {
	mu sync.Mutex
	m  map[string][]*conn
}

// dedicate returns a conn to d's node that take took: one of those d's
// shares have to that node, if take takes it (it has no such user yet),
// or else a new one, which the shares keep from then on. With share
// false, or on a client of several nodes (a Cluster's or Sentinel's:
// which node a key leads to is rueidis's to know), it is a new one that
// nobody shares.
func (d *rueidisDriver) dedicate(share bool, take func(*conn) bool) *conn {
	addr, ok := d.soleNode()
	if !share || !ok {
		c := d.newConn(nil, "")
		take(c)
		return c
	}
	s := d.shares
	s.mu.Lock()
	for _, c := range s.m[addr] {
		if take(c) {
			s.mu.Unlock()
			return c
		}
	}
	s.mu.Unlock()
	c := d.newConn(s, addr) // rueidis may dial here: not under s.mu
	take(c)
	s.mu.Lock()
	s.m[addr] = append(s.m[addr], c) // lost already (rueidis may say so at once)? its user's leave forgets it
	s.mu.Unlock()
	return c
}

// soleNode is the address of the one node d's client talks to, if it is
// a standalone client (a node of a Cluster is one too).
func (d *rueidisDriver) soleNode() (string, bool) {
	if d.kind != driver.Single {
		return "", false
	}
	nodes := d.c.Nodes()
	if len(nodes) != 1 {
		return "", false
	}
	for addr := range nodes {
		return addr, true
	}
	return "", false
}

// newConn takes a connection of its own from rueidis and hooks it to
// hand messages, and in RESP3 invalidations, to its users.
func (d *rueidisDriver) newConn(s *shares, addr string) *conn {
	dc, give := d.c.Dedicate()
	c := &conn{shares: s, addr: addr, dc: dc, give: give, gone: make(chan struct{})}
	c.ended = dc.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: c.message, OnSubscription: c.subscription})
	if d.Protocol() != 2 {
		// It keeps the hooks above; their channel is closed, and this
		// one's tells of the connection's end.
		c.ended = dc.SetOnInvalidations(c.invalidated)
	}
	go c.watch()
	return c
}

// watch waits for the connection's end, and tells its users.
func (c *conn) watch() {
	err, ok := <-c.ended
	if !ok || err == nil {
		err = errPubSubClosed
	}
	c.err = err
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	c.forget()
	close(c.gone)
}

// forget takes c out of its shares: a later user opens another.
func (c *conn) forget() {
	if c.shares == nil {
		return
	}
	c.shares.mu.Lock()
	defer c.shares.mu.Unlock()
	list := slices.DeleteFunc(c.shares.m[c.addr], func(o *conn) bool { return o == c })
	if len(list) == 0 {
		delete(c.shares.m, c.addr)
	} else {
		c.shares.m[c.addr] = list
	}
}

func (c *conn) message(m rueidis.PubSubMessage) {
	if ps := c.pubsub(); ps != nil {
		ps.message(m)
	}
}

func (c *conn) subscription(s rueidis.PubSubSubscription) {
	if ps := c.pubsub(); ps != nil {
		ps.subscription(s)
	}
}

func (c *conn) invalidated(ms []rueidis.RedisMessage) {
	c.mu.Lock()
	inv := c.inv
	c.mu.Unlock()
	if inv == nil {
		return
	}
	if ms == nil {
		inv(nil) // every key: a FLUSHALL
		return
	}
	keys := make([]string, 0, len(ms))
	for _, m := range ms {
		if k, err := m.ToString(); err == nil {
			keys = append(keys, k)
		}
	}
	inv(keys)
}

func (c *conn) pubsub() *pubsub {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ps
}

// join makes ps the pub/sub user of c, or reports false if c has one, or
// is closing.
func (c *conn) join(ps *pubsub) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ps != nil || c.closing {
		return false
	}
	c.ps = ps
	return true
}

// track makes inv the tracking user's callback, as join does.
func (c *conn) track(inv func([]string)) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inv != nil || c.closing {
		return false
	}
	c.inv = inv
	return true
}

// leaveTimeout bounds the unsubscribe of a pub/sub user that leaves its
// connection to tracking.
const leaveTimeout = time.Second

// leave takes the pub/sub user off c, and closes c if nobody else uses
// it. If tracking stays on it, it first unsubscribes every channel (and
// shard channel, if sharded), as the next pub/sub user wants none of
// them; until then it is still c's pub/sub user, so that no other joins c
// and loses its channels to it.
func (c *conn) leave(sharded bool) {
	c.mu.Lock()
	tracked := c.inv != nil && !c.closing
	c.mu.Unlock()
	if tracked {
		ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
		cmds := []rueidis.Completed{c.dc.B().Unsubscribe().Build()}
		if sharded {
			cmds = append(cmds, c.dc.B().Sunsubscribe().Build())
		}
		c.dc.DoMulti(ctx, cmds...) // on failure, their messages are hints to whoever comes
		cancel()
	}
	c.mu.Lock()
	c.ps = nil
	c.mu.Unlock()
	c.closeIfUnused()
}

// untrack takes the tracking user off c, and closes c if nobody else
// uses it. The keys it registered stay tracked on the connection: their
// invalidations go nowhere, or to the next tracking user, which reads
// its keys anew anyway.
func (c *conn) untrack() {
	c.mu.Lock()
	c.inv = nil
	c.mu.Unlock()
	c.closeIfUnused()
}

// closeIfUnused closes c if it has no user: rueidis would send CLIENT
// TRACKING OFF and UNSUBSCRIBE on a connection it is given back, and wait
// for the replies, however long a lost connection takes to answer; it is
// given back closed.
func (c *conn) closeIfUnused() {
	c.mu.Lock()
	unused := c.ps == nil && c.inv == nil
	if unused {
		c.closing = true // from now on, nobody joins it
	}
	c.mu.Unlock()
	if !unused {
		return
	}
	c.closed.Do(func() {
		c.dc.SetPubSubHooks(rueidis.PubSubHooks{})
		c.dc.Close()
		c.give()
		c.forget()
	})
	<-c.gone
}
