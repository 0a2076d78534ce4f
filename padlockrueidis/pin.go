package padlockrueidis

import (
	"context"
	"fmt"
	"strings"

	"github.com/padlock-go/padlock/driver"
	"github.com/redis/rueidis"
)

// maxRedirects bounds the MOVED and ASK a pinned connection follows for
// one command.
const maxRedirects = 5

// pinned is a driver.Conn: a connection of rueidis's own (Dedicate) to the
// primary of key, or, after a redirect, to the node it named.
type pinned struct {
	d    *rueidisDriver
	key  string
	dc   rueidis.DedicatedClient
	give func() // gives dc back to rueidis's pool
}

// Pin takes a connection of its own from rueidis: on a Cluster, to the
// master of key's slot, which its first command picks.
func (d *rueidisDriver) Pin(ctx context.Context, key string) (driver.Conn, error) {
	if err := d.gate.pass(ctx, d); err != nil {
		return nil, err
	}
	dc, give := d.c.Dedicate()
	return &pinned{d: d, key: key, dc: dc, give: give}, nil
}

// Do sends args on the pinned connection. A MOVED or ASK is followed to
// the node it names, on a connection to that node, which the pin keeps.
func (p *pinned) Do(ctx context.Context, args ...any) (any, error) {
	v, err := p.send(ctx, false, args)
	for range maxRedirects {
		addr, asking, ok := redirect(err)
		if !ok {
			break
		}
		if err := p.follow(ctx, addr); err != nil {
			return nil, err
		}
		v, err = p.send(ctx, asking, args)
	}
	return v, err
}

// send sends args on the pinned connection, after ASKING if asking.
func (p *pinned) send(ctx context.Context, asking bool, args []any) (any, error) {
	cmd, err := p.d.build(p.dc, p.key, args)
	if err != nil {
		return nil, err
	}
	if !asking {
		return p.d.reply(p.dc.Do(ctx, cmd))
	}
	rs := p.dc.DoMulti(ctx, p.dc.B().Asking().Build().SetSlot(p.key), cmd)
	if _, err := p.d.reply(rs[0]); err != nil {
		return nil, err
	}
	return p.d.reply(rs[1])
}

// follow moves the pin to a connection of its own to addr. A node that
// rueidis does not know yet (a master just added, that owns no slot while
// the first migrates to it) it learns by following the same redirect for
// EXISTS of the key, which is harmless.
func (p *pinned) follow(ctx context.Context, addr string) error {
	node, ok := p.d.c.Nodes()[addr]
	if !ok {
		exists := p.d.c.B().Arbitrary("EXISTS").Args(p.key).Build().SetSlot(p.key)
		if err := p.d.c.Do(ctx, exists).Error(); err != nil {
			return p.d.classify(err)
		}
		if node, ok = p.d.c.Nodes()[addr]; !ok {
			return fmt.Errorf("padlockrueidis: %s, where a redirect for %q leads, is not a node the rueidis client knows", addr, p.key)
		}
	}
	p.give()
	p.dc, p.give = node.Dedicate()
	return nil
}

// redirect returns the address a MOVED or ASK error reply names, and
// whether it is an ASK.
func redirect(err error) (addr string, asking, ok bool) {
	e, reply := driver.Error(err)
	if !reply {
		return "", false, false
	}
	f := strings.Fields(string(e))
	if len(f) < 3 || (f[0] != "MOVED" && f[0] != "ASK") {
		return "", false, false
	}
	return hostPort(f[2]), f[0] == "ASK", true
}

// hostPort is addr as rueidis names its nodes: an IPv6 host in brackets.
func hostPort(addr string) string {
	if strings.Count(addr, ":") < 2 || strings.HasPrefix(addr, "[") {
		return addr
	}
	i := strings.LastIndexByte(addr, ':')
	return "[" + addr[:i] + "]" + addr[i:]
}

// Close gives the connection back to rueidis.
func (p *pinned) Close() error {
	p.give()
	return nil
}
