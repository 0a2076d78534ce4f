package padlockrueidis

import (
	"context"
	"fmt"
	"sync"

	"github.com/padlock-go/padlock/driver"
	"github.com/redis/rueidis"
)

// tracking is a driver.Tracking: CLIENT TRACKING on a connection of
// rueidis's own (a conn, the node's pub/sub connection where it has one),
// whose invalidations rueidis hands to the conn's hook (RESP3 pushes on
// the connection itself: one connection, no redirect).
type tracking struct {
	d    *rueidisDriver
	key  string // every command is sent to its slot: the connection's node
	c    *conn
	stop chan struct{} // closed by Close
	done chan struct{}
	once sync.Once
}

// Track turns tracking on, on a connection to the master of key's slot:
// on a client of one node, the one padlock's pub/sub uses, if it has one
// (see conn). A RESP2 client (AlwaysRESP2) gets no invalidation on the
// connection itself: Track refuses it.
func (d *rueidisDriver) Track(ctx context.Context, key string, invalidated func([]string)) (driver.Tracking, error) {
	if err := d.gate.pass(ctx, d); err != nil {
		return nil, err
	}
	if d.Protocol() == 2 {
		return nil, fmt.Errorf("padlockrueidis: tracking needs RESP3 (the client has AlwaysRESP2)")
	}
	t := &tracking{d: d, key: key, stop: make(chan struct{}), done: make(chan struct{})}
	t.c = d.dedicate(true, func(c *conn) bool { return c.track(invalidated) })
	on := t.c.dc.B().Arbitrary("CLIENT", "TRACKING").Args("ON").Build().SetSlot(key)
	if err := t.c.dc.Do(ctx, on).Error(); err != nil {
		t.c.untrack()
		return nil, d.classify(err)
	}
	go func() {
		select {
		case <-t.c.gone:
		case <-t.stop:
		}
		close(t.done)
	}()
	return t, nil
}

// Batch sends cmds on the connection with one DoMulti, each to the
// connection's node (a key of another answers MOVED).
func (t *tracking) Batch(ctx context.Context, cmds []driver.Cmd) {
	multi := make([]rueidis.Completed, 0, len(cmds))
	index := make([]int, 0, len(cmds))
	for i := range cmds {
		cmd, err := t.d.build(t.c.dc, "", cmds[i].Args)
		if err != nil {
			cmds[i].Reply, cmds[i].Err = nil, err
			continue
		}
		multi = append(multi, cmd.SetSlot(t.key))
		index = append(index, i)
	}
	if len(multi) == 0 {
		return
	}
	for j, r := range t.c.dc.DoMulti(ctx, multi...) {
		c := &cmds[index[j]]
		c.Reply, c.Err = t.d.reply(r)
	}
}

func (t *tracking) Done() <-chan struct{} { return t.done }

// Close takes tracking's hook off the connection, and leaves it (see
// conn): it is closed unless padlock's pub/sub uses it.
func (t *tracking) Close() {
	t.once.Do(func() {
		t.c.untrack()
		close(t.stop)
	})
	<-t.done
}
