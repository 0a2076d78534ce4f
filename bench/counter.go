package main

import (
	"context"
	"crypto/tls"
	"log"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// A counter counts what one client sends to Redis, two ways:
//
//   - trips, the round trips as the caller sees them: each command or
//     pipeline a caller sends and waits for. On go-redis, a hook counts
//     each Process and each ProcessPipeline; on rueidis and valkey-go, a
//     wrapper of the client counts each Do and each DoMulti (and their
//     DoCache forms). Neither counts what goes on a pub/sub connection
//     (go-redis runs no hook for it; on rueidis it is a Dedicate'd
//     connection, not the client's Do). go-redis's hook also sees the
//     handshake of each connection its pool opens (HELLO, and CLIENT
//     SETINFO in a pipeline: two trips), which rueidis and valkey-go send
//     outside Do: in a short turn with a pool that grows, go-redis counts
//     a little more (16 goroutines on one key, 1s: 17 connections, 0.09
//     trips per hand-off), for the same commands per hand-off.
//   - writes, the writes on the client's sockets, pub/sub connections
//     included, counted by a net.Conn from the client's dialer. Each
//     write carries one or more commands: go-redis writes each command or
//     pipeline on its own, while rueidis and valkey-go send the commands
//     of concurrent callers on one connection together (auto-pipelining),
//     so on them writes can be fewer than trips.
//
// The Redis commands a cycle costs are counted on the server, from INFO
// commandstats, which sees every driver alike.
type counter struct {
	trips  atomic.Int64
	writes atomic.Int64

	mu    sync.Mutex
	conns map[string]bool // the local address of each connection it dialed
}

// reset zeroes the counts.
func (c *counter) reset() {
	c.trips.Store(0)
	c.writes.Store(0)
}

// dial dials addr with d and counts the writes on the connection.
func (c *counter) dial(ctx context.Context, d *net.Dialer, network, addr string) (net.Conn, error) {
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.conns == nil {
		c.conns = map[string]bool{}
	}
	c.conns[conn.LocalAddr().String()] = true
	c.mu.Unlock()
	return countedConn{conn, c}, nil
}

// dialed reports whether the client dialed the connection whose local
// address (the client's address as Redis sees it) is addr.
func (c *counter) dialed(addr string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conns[addr]
}

// redisDialer is dial as go-redis's Options.Dialer.
func (c *counter) redisDialer(ctx context.Context, network, addr string) (net.Conn, error) {
	return c.dial(ctx, &net.Dialer{}, network, addr)
}

// rueidisDialer is dial as rueidis's and valkey-go's ClientOption.DialCtxFn
// (the bench's server has no TLS).
func (c *counter) rueidisDialer(ctx context.Context, addr string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
	return c.dial(ctx, d, "tcp", addr)
}

// countedConn is a net.Conn that counts its writes.
type countedConn struct {
	net.Conn
	c *counter
}

func (cc countedConn) Write(b []byte) (int, error) {
	cc.c.writes.Add(1)
	return cc.Conn.Write(b)
}

// The go-redis hook: a command or a pipeline is one trip.

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.trips.Add(1)
		return next(ctx, cmd)
	}
}
func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.trips.Add(1)
		return next(ctx, cmds)
	}
}

// countedClient is a go-redis client of the bench's server, with a counter
// of the round trips and socket writes it makes.
func countedClient(addr string) (*redis.Client, *counter) {
	cnt := &counter{}
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64, Dialer: cnt.redisDialer})
	rdb.AddHook(cnt)
	return rdb, cnt
}

// serverCalls is the number of commands Redis has run, from INFO
// commandstats (commands run by scripts included), asked through admin, a
// client no counter counts. The INFO running is not in it yet: the
// difference of two calls counts the first INFO, one to subtract.
func serverCalls(admin *redis.Client) int64 {
	info, err := admin.Info(context.Background(), "commandstats").Result()
	if err != nil {
		log.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		_, rest, ok := strings.Cut(line, ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
		total += n
	}
	return total
}
