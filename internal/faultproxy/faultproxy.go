// Package faultproxy is a TCP proxy on loopback for tests, between a client
// and a server, that injects network faults: added latency, a blackhole
// (connections accepted, nothing answered), a reply lost after its request
// was delivered, cut connections, and connections that go silent while
// they stay open (half-open).
package faultproxy

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// A Proxy forwards connections from its own address to a target.
type Proxy struct {
	ln     net.Listener
	target string

	latency   atomic.Int64 // nanoseconds added to every chunk, both ways
	blackhole atomic.Bool  // swallow everything, answer nothing
	down      atomic.Bool  // close every connection at once, as a server that is down
	closed    atomic.Bool  // Close was called: forward nothing more
	dropReply atomic.Int32 // replies still to drop, each followed by a cut
	next      atomic.Int64 // the number of the next connection accepted
	frozen    atomic.Int64 // connections numbered below it swallow everything

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// Start listens on a free 127.0.0.1 port and forwards to target.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: make(map[net.Conn]struct{})}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the address clients dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays every chunk of data, each way, by d.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// SetBlackhole makes the proxy swallow everything and answer nothing (on),
// on open connections and new ones, or forward again (off).
func (p *Proxy) SetBlackhole(on bool) { p.blackhole.Store(on) }

// DropNextReply makes the proxy deliver the next request to the server but
// throw its reply away and cut that client's connection, as a network
// failure right after the server acted would.
func (p *Proxy) DropNextReply() { p.dropReply.Add(1) }

// FreezeOpen makes every connection open now swallow everything, both
// ways, and stay open, as one that a NAT or a dead peer forgot without a
// word would; connections opened later forward as before.
func (p *Proxy) FreezeOpen() { p.frozen.Store(p.next.Load()) }

// SetDown makes the proxy act as a server that is down (on): it closes
// every open connection and each new one at once; or forward again (off).
func (p *Proxy) SetDown(on bool) {
	p.down.Store(on)
	if on {
		p.CutAll()
	}
}

// CutAll closes every open connection; new ones are still accepted.
func (p *Proxy) CutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

// Close stops the proxy, closes every connection and waits for its
// goroutines.
func (p *Proxy) Close() {
	p.closed.Store(true)
	_ = p.ln.Close()
	p.CutAll()
	p.wg.Wait()
}

func (p *Proxy) track(c net.Conn, add bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.down.Load() {
			_ = client.Close()
			continue
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.track(client, true)
		p.track(server, true)
		// Went down, or was closed, while this one was being dialled (a
		// connection tracked after Close's CutAll would be left open, and
		// Close would wait for its pipes forever).
		if p.down.Load() || p.closed.Load() {
			p.track(client, false)
			p.track(server, false)
			_ = client.Close()
			_ = server.Close()
			continue
		}
		id := p.next.Add(1) - 1
		p.wg.Go(func() {
			p.pipe(client, server, false, id)
			p.track(client, false)
		})
		p.wg.Go(func() {
			p.pipe(server, client, true, id)
			p.track(server, false)
		})
	}
}

// pipe copies from src to dst, of connection number id, with the faults
// applied, until either side closes; then it closes both.
func (p *Proxy) pipe(src, dst net.Conn, replies bool, id int64) {
	defer func() {
		_ = src.Close()
		_ = dst.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := p.latency.Load(); d > 0 {
				time.Sleep(time.Duration(d))
			}
			switch {
			case p.blackhole.Load() || id < p.frozen.Load():
				// Swallowed.
			case replies && p.takeDrop():
				return // the reply is lost with the connection
			default:
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// takeDrop consumes one pending DropNextReply, if any.
func (p *Proxy) takeDrop() bool {
	for {
		n := p.dropReply.Load()
		if n <= 0 {
			return false
		}
		if p.dropReply.CompareAndSwap(n, n-1) {
			return true
		}
	}
}
