package padlockrueidis

import (
	"sync"

	"github.com/padlock-go/padlock/driver"
	"github.com/redis/rueidis"
)

// A conn is a connection of rueidis's own (Dedicate) that carries
// padlock's pub/sub, its tracking, or both: RESP3 delivers messages and
// invalidations on the connection itself, so a node whose waiters are
// both notified and watched costs one connection, and one keep-alive PING
// a second (rueidis's, on an idle connection), rather than two.
//
// The pub/sub user's Close closes the connection (it is closed rather
// than unsubscribed, and a redial wants a fresh one): a tracking user
// then sees it lost, and opens another. The tracking user's Close only
// leaves it, unless nobody else uses it.
type conn struct {
	shares *shares // where it is found by address; nil for one of its own
	addr   string
	dc     rueidis.DedicatedClient
	give   func()
	gone   chan struct{} // closed once the connection is lost or closed
	err    error         // why, set before gone is closed

	hooks  <-chan error // rueidis's: the connection's end
	closed sync.Once

	mu      sync.Mutex
	ps      *pubsub        // the pub/sub user, or nil
	inv     func([]string) // the tracking user's, or nil
	closing bool           // lost, or being closed: nobody joins it
}

// shares are the conns of a driver and its Nodes' drivers, by the address
// of the one node each is to.
type shares struct {
	mu sync.Mutex
	m  map[string]*conn
}

// dedicate returns a conn to d's node that take took: the one d's shares
// have to that node, if take takes it (it has no such user yet), or else
// a new one, which the shares keep from then on. With share false, or on
// a client of several nodes (a Cluster's or Sentinel's: which node a key
// leads to is rueidis's to know), it is a new one that nobody shares.
func (d *rueidisDriver) dedicate(share bool, take func(*conn) bool) *conn {
	addr, ok := d.soleNode()
	if !share || !ok {
		c := d.newConn(nil, "")
		take(c)
		return c
	}
	s := d.shares
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.m[addr]; c != nil && take(c) {
		return c
	}
	c := d.newConn(s, addr)
	take(c)
	if s.m == nil {
		s.m = map[string]*conn{}
	}
	s.m[addr] = c
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
// hand messages and invalidations to its users.
func (d *rueidisDriver) newConn(s *shares, addr string) *conn {
	dc, give := d.c.Dedicate()
	c := &conn{shares: s, addr: addr, dc: dc, give: give, gone: make(chan struct{})}
	// The second call keeps the first's hooks; the first's channel is
	// closed by it, the second's tells of the connection's end.
	dc.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: c.message, OnSubscription: c.subscription})
	c.hooks = dc.SetOnInvalidations(c.invalidated)
	go c.watch()
	return c
}

// watch waits for the connection's end, and tells its users.
func (c *conn) watch() {
	err, ok := <-c.hooks
	if !ok || err == nil {
		err = errPubSubClosed
	}
	c.err = err
	c.forget()
	close(c.gone)
}

// forget takes c out of its shares: a later user opens another.
func (c *conn) forget() {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	if c.shares == nil {
		return
	}
	c.shares.mu.Lock()
	if c.shares.m[c.addr] == c {
		delete(c.shares.m, c.addr)
	}
	c.shares.mu.Unlock()
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
// is closing: the caller opens a conn of its own.
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

// untrack takes the tracking user off c, and closes c if nobody else
// uses it. The keys it registered stay tracked on the connection: their
// invalidations go nowhere.
func (c *conn) untrack() {
	c.mu.Lock()
	c.inv = nil
	alone := c.ps == nil
	c.mu.Unlock()
	if alone {
		c.close()
	}
}

// close closes the connection, whoever uses it, gives it back to
// rueidis, closed, and waits for watch.
func (c *conn) close() {
	c.closed.Do(func() {
		c.mu.Lock()
		c.ps, c.inv = nil, nil
		c.mu.Unlock()
		c.forget()
		c.dc.SetPubSubHooks(rueidis.PubSubHooks{})
		c.dc.Close()
		c.give()
	})
	<-c.gone
}
