package padlockrueidis

import (
	"context"
	"fmt"
	"sync"

	"github.com/padlock-go/padlock/driver"
	"github.com/redis/rueidis"
)

// tracking is a driver.Tracking: a connection of rueidis's own (Dedicate)
// with CLIENT TRACKING on, whose invalidations rueidis hands to
// SetOnInvalidations (RESP3 pushes on the connection itself: one
// connection, no redirect). It is closed when it is done with.
type tracking struct {
	d    *rueidisDriver
	key  string // every command is sent to its slot: the connection's node
	dc   rueidis.DedicatedClient
	done chan struct{}
	once sync.Once
}

// Track opens a connection of its own to the master of key's slot and
// turns tracking on. A RESP2 client (AlwaysRESP2) gets no invalidation on
// the connection itself: Track refuses it.
func (d *rueidisDriver) Track(ctx context.Context, key string, invalidated func([]string)) (driver.Tracking, error) {
	if err := d.gate.pass(ctx, d); err != nil {
		return nil, err
	}
	if d.Protocol() == 2 {
		return nil, fmt.Errorf("padlockrueidis: tracking needs RESP3 (the client has AlwaysRESP2)")
	}
	dc, _ := d.c.Dedicate() // Close gives it back
	t := &tracking{d: d, key: key, dc: dc, done: make(chan struct{})}
	lost := dc.SetOnInvalidations(func(ms []rueidis.RedisMessage) {
		if ms == nil {
			invalidated(nil)
			return
		}
		keys := make([]string, 0, len(ms))
		for _, m := range ms {
			if k, err := m.ToString(); err == nil {
				keys = append(keys, k)
			}
		}
		invalidated(keys)
	})
	on := dc.B().Arbitrary("CLIENT", "TRACKING").Args("ON").Build().SetSlot(key)
	if err := dc.Do(ctx, on).Error(); err != nil {
		dc.Close()
		return nil, d.classify(err)
	}
	go func() {
		for range lost {
		}
		t.once.Do(func() { close(t.done) })
	}()
	return t, nil
}

// Batch sends cmds on the connection with one DoMulti, each to the
// connection's node (a key of another answers MOVED).
func (t *tracking) Batch(ctx context.Context, cmds []driver.Cmd) {
	multi := make([]rueidis.Completed, 0, len(cmds))
	index := make([]int, 0, len(cmds))
	for i := range cmds {
		cmd, err := t.d.build(t.dc, "", cmds[i].Args)
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
	for j, r := range t.dc.DoMulti(ctx, multi...) {
		c := &cmds[index[j]]
		c.Reply, c.Err = t.d.reply(r)
	}
}

func (t *tracking) Done() <-chan struct{} { return t.done }

// Close closes the connection (rueidis would send CLIENT TRACKING OFF on
// one it is given back, and wait for the reply, however long a lost
// connection takes to answer), and gives it back, closed.
func (t *tracking) Close() {
	t.dc.Close()
	t.once.Do(func() { close(t.done) })
}
