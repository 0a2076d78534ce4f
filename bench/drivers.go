package main

import (
	"context"
	"log"
	"time"

	"github.com/redis/rueidis"
	"github.com/valkey-io/valkey-go"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/padlockrueidis"
	"github.com/padlock-go/padlock/padlockvalkey"
)

// A padlockDriver is padlock on one Redis client: go-redis, rueidis or
// valkey-go.
type padlockDriver struct {
	name string
	// open returns a padlock Client on a new client of addr, the counter
	// of that client, and the func that closes both.
	open func(addr string, opts ...padlock.Option) (*padlock.Client, *counter, func())
}

// allPadlockDrivers are the drivers padlock runs on, go-redis first.
func allPadlockDrivers() []padlockDriver {
	return []padlockDriver{
		{"padlock", openGoRedis},
		{"padlock-rueidis", openRueidis},
		{"padlock-valkey", openValkey},
	}
}

// padlockDrivers are allPadlockDrivers, or with -impl the one of that name
// (none for another implementation).
func padlockDrivers() []padlockDriver {
	all := allPadlockDrivers()
	if *only == "" {
		return all
	}
	for _, d := range all {
		if d.name == *only {
			return []padlockDriver{d}
		}
	}
	return nil
}

func openGoRedis(addr string, opts ...padlock.Option) (*padlock.Client, *counter, func()) {
	rdb, cnt := countedClient(addr)
	c := padlock.New(rdb, opts...)
	return c, cnt, func() { _ = c.Close(); _ = rdb.Close() }
}

func openRueidis(addr string, opts ...padlock.Option) (*padlock.Client, *counter, func()) {
	rc, cnt := rueidisClient(addr)
	c := padlockrueidis.New(rc, opts...)
	return c, cnt, func() { _ = c.Close(); rc.Close() }
}

func openValkey(addr string, opts ...padlock.Option) (*padlock.Client, *counter, func()) {
	vc, cnt := valkeyClient(addr)
	c := padlockvalkey.New(vc, opts...)
	return c, cnt, func() { _ = c.Close(); vc.Close() }
}

// rueidisClient is a rueidis client of addr with its default settings
// (client-side caching and auto-pipelining on), counted.
func rueidisClient(addr string) (rueidis.Client, *counter) {
	cnt := &counter{}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DialCtxFn: cnt.rueidisDialer})
	if err != nil {
		log.Fatalf("rueidis: %v", err)
	}
	return &countedRueidis{c, cnt}, cnt
}

// valkeyClient is rueidisClient for valkey-go.
func valkeyClient(addr string) (valkey.Client, *counter) {
	cnt := &counter{}
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DialCtxFn: cnt.rueidisDialer})
	if err != nil {
		log.Fatalf("valkey-go: %v", err)
	}
	return &countedValkey{c, cnt}, cnt
}

// countedRueidis is a rueidis.Client that counts a trip for each Do and
// DoMulti (and their cached forms): the calls a caller waits for, as the
// go-redis hook counts them. Dedicated connections (padlock's pub/sub, and
// its write followed by WAIT) are not counted.
type countedRueidis struct {
	rueidis.Client
	cnt *counter
}

func (c *countedRueidis) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.cnt.trips.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c *countedRueidis) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	c.cnt.trips.Add(1)
	return c.Client.DoMulti(ctx, multi...)
}

func (c *countedRueidis) DoCache(ctx context.Context, cmd rueidis.Cacheable, ttl time.Duration) rueidis.RedisResult {
	c.cnt.trips.Add(1)
	return c.Client.DoCache(ctx, cmd, ttl)
}

func (c *countedRueidis) DoMultiCache(ctx context.Context, multi ...rueidis.CacheableTTL) []rueidis.RedisResult {
	c.cnt.trips.Add(1)
	return c.Client.DoMultiCache(ctx, multi...)
}

// countedValkey is countedRueidis for valkey-go.
type countedValkey struct {
	valkey.Client
	cnt *counter
}

func (c *countedValkey) Do(ctx context.Context, cmd valkey.Completed) valkey.ValkeyResult {
	c.cnt.trips.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c *countedValkey) DoMulti(ctx context.Context, multi ...valkey.Completed) []valkey.ValkeyResult {
	c.cnt.trips.Add(1)
	return c.Client.DoMulti(ctx, multi...)
}

func (c *countedValkey) DoCache(ctx context.Context, cmd valkey.Cacheable, ttl time.Duration) valkey.ValkeyResult {
	c.cnt.trips.Add(1)
	return c.Client.DoCache(ctx, cmd, ttl)
}

func (c *countedValkey) DoMultiCache(ctx context.Context, multi ...valkey.CacheableTTL) []valkey.ValkeyResult {
	c.cnt.trips.Add(1)
	return c.Client.DoMultiCache(ctx, multi...)
}
