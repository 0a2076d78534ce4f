package main

import (
	"context"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/redistest"
)

// free: a waiter blocked on a key held by another client of the same
// implementation holds the key once the key is free. How soon, from the
// moment the key is free to the moment the waiter holds it, for each way
// a key is freed. Every implementation is measured when the holder
// crashed (ttl 1s, never released: free at its expiry), after an
// operator's DEL, and after a normal release; padlock's drivers also
// after UNLINK, FLUSHALL, an eviction and another library's overwrite
// (SET … PX 1), and so is padlock on go-redis as a Redis user without
// CLIENT TRACKING ("padlock-polls", which polls). 5 trials per way and
// round, each on a key and two new clients of its own. Then the cost of
// waiting when nothing happens: the commands/s that Redis runs while one
// client holds a key (ttl 1 minute, no renewal of padlock's within the
// window) and one waits for it, all and each client's (idleCost). Last,
// padlock's drivers on every server of PADLOCK_SERVERS (the compatibility
// matrix), when it is set: every way but the crash and the release, 3
// trials each per round.
func free(addr string) {
	const trials = 5
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	ims := append(impls(), pollingImpl(admin))
	type row struct {
		name  string
		waits map[string][]time.Duration
		idle  idleCosts
	}
	var rows []row
	for _, im := range ims {
		r := row{name: im.name, waits: map[string][]time.Duration{}}
		for round := range *rounds {
			for _, way := range freeWays {
				if !way.peers && !isPadlock(im.name) || way.name == "crash" && strings.HasPrefix(im.name, "rueidislock") {
					continue // rueidislock keeps every lock alive until released: no holder to crash in-process
				}
				if *ways != "" && !slices.Contains(strings.Split(*ways, ","), way.name) {
					continue
				}
				for trial := range trials {
					key := fmt.Sprintf("bench:free:%s:%s:%d:%d", im.name, way.name, round, trial)
					r.waits[way.name] = append(r.waits[way.name], freeOnce(addr, admin, im, key, way, 300*time.Millisecond))
				}
			}
		}
		r.idle = idleCost(admin, im)
		rows = append(rows, r)
	}
	fmt.Printf("## A waiter served when the key is free: %d rounds x %d trials per way; ms from the moment the key is free to the moment the waiter holds it, median / max\n\n", *rounds, trials)
	fmt.Print("| implementation |")
	for _, way := range freeWays {
		fmt.Printf(" %s |", way.title)
	}
	fmt.Println(" commands/s while one client holds the key and another waits: all (the waiter's client / the holder's) |")
	fmt.Println("| --- |" + strings.Repeat(" ---: |", len(freeWays)+1))
	for _, r := range rows {
		fmt.Printf("| %s |", r.name)
		for _, way := range freeWays {
			fmt.Printf(" %s |", medianMax(r.waits[way.name]))
		}
		fmt.Printf(" %.1f (%.1f / %.1f) |\n", r.idle.all, r.idle.waiter, r.idle.holder)
	}
	fmt.Println()
	freeMatrix()
}

// A freeWay is a way a key is freed behind its holder's back, or not.
type freeWay struct {
	name, title string
	peers       bool // measured on every implementation; else on padlock's drivers only
	// free frees keys (the lock's) and returns when; nil: at the
	// holder's expiry.
	free func(ctx context.Context, admin *redis.Client, keys []string, unlock func(context.Context) error) error
}

var freeWays = []freeWay{
	{"crash", "the holder crashed (ttl 1s)", true, nil},
	{"DEL", "`DEL`", true, func(ctx context.Context, admin *redis.Client, keys []string, _ func(context.Context) error) error {
		return admin.Del(ctx, keys...).Err()
	}},
	{"UNLINK", "`UNLINK`", false, func(ctx context.Context, admin *redis.Client, keys []string, _ func(context.Context) error) error {
		return admin.Unlink(ctx, keys...).Err()
	}},
	{"FLUSHALL", "`FLUSHALL`", false, func(ctx context.Context, admin *redis.Client, _ []string, _ func(context.Context) error) error {
		return admin.FlushAll(ctx).Err()
	}},
	{"eviction", "an eviction", false, func(ctx context.Context, admin *redis.Client, _ []string, _ func(context.Context) error) error {
		// The limit comes down to nothing and back: Redis evicts every key
		// with a ttl, the shortest first.
		_, err := admin.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.ConfigSet(ctx, "maxmemory-policy", "volatile-ttl")
			p.ConfigSet(ctx, "maxmemory", "1")
			p.ConfigSet(ctx, "maxmemory", "0")
			p.ConfigSet(ctx, "maxmemory-policy", "noeviction")
			return nil
		})
		return err
	}},
	{"overwrite", "another library's overwrite (`SET … PX 1`)", false, func(ctx context.Context, admin *redis.Client, keys []string, _ func(context.Context) error) error {
		return admin.Set(ctx, keys[0], "another library's token", time.Millisecond).Err()
	}},
	{"release", "a normal release", true, func(ctx context.Context, _ *redis.Client, _ []string, unlock func(context.Context) error) error {
		return unlock(ctx)
	}},
}

// isPadlock reports whether the implementation named name is padlock's.
func isPadlock(name string) bool { return strings.HasPrefix(name, "padlock") }

// medianMax is "median / max" of w in ms, or "—" when w is empty.
func medianMax(w []time.Duration) string {
	if len(w) == 0 {
		return "—"
	}
	w = slices.Sorted(slices.Values(w))
	return ms(w[len(w)/2]) + " / " + ms(w[len(w)-1])
}

// pollingImpl is padlock on go-redis as a Redis user that may not run
// CLIENT TRACKING: its waiters' Client polls.
func pollingImpl(admin *redis.Client) impl {
	ctx := context.Background()
	rule := []any{"ACL", "SETUSER", "bench-polls", "reset", "on", ">bench", "~*", "+@all", "-client|tracking", "&*"}
	err := admin.Do(ctx, rule...).Err()
	if err != nil { // Redis 6.0: no channel rules, no subcommand taken away
		rule = append(rule[:len(rule)-2], "-client")
		err = admin.Do(ctx, rule...).Err()
	}
	if err != nil {
		log.Fatalf("free: ACL SETUSER: %v", err)
	}
	return impl{"padlock-polls", func(addr string) (locker, *counter) {
		cnt := &counter{}
		rdb := redis.NewClient(&redis.Options{Addr: addr, Username: "bench-polls", Password: "bench", Dialer: cnt.redisDialer})
		c := padlock.New(rdb)
		return padlockLocker{"padlock-polls", c, func() { _ = c.Close(); _ = rdb.Close() }}, cnt
	}}
}

// freeOnce is one trial: a holder and a waiter, each a new client of im,
// on key, freed by way once the waiter has waited for settle. It returns
// how soon the waiter held it.
func freeOnce(addr string, admin *redis.Client, im impl, key string, way freeWay, settle time.Duration) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder, _ := im.new(addr)
	defer holder.close()
	waiter, _ := im.new(addr)
	defer waiter.close()
	ttl := lockTTL
	if way.free == nil {
		ttl = time.Second
	}
	unlock, err := holder.try(ctx, key, ttl)
	if err != nil {
		log.Fatalf("free: %s: %v", im.name, err)
	}
	expires := time.Now().Add(ttl)
	held := make(chan time.Time, 1)
	released := make(chan struct{})
	defer func() { <-released }() // before the clients close: a call in flight through a client being closed may leave a connection open (rueidis)
	go func() {
		defer close(released)
		unlockW, err := waiter.lock(ctx, key, lockTTL)
		at := time.Now()
		if err != nil {
			log.Fatalf("free: %s: the waiter: %v", im.name, err)
		}
		held <- at
		_ = unlockW(context.Background())
	}()
	// The waiter waits; a jitter, so that a poll's phase is not the
	// same in every trial.
	time.Sleep(settle + rand.N(100*time.Millisecond))
	freed := expires
	if way.free != nil {
		keys := lockKeys(ctx, admin, key)
		freed = time.Now()
		if err := way.free(ctx, admin, keys, unlock); err != nil {
			log.Fatalf("free: %s: %s: %v", im.name, way.name, err)
		}
	}
	select {
	case at := <-held:
		return at.Sub(freed)
	case <-ctx.Done():
		log.Fatalf("free: %s: the waiter was not served within a minute of a %s", im.name, way.name)
		return 0
	}
}

// lockKeys are the keys that hold key's lock: key itself, or the keys of
// rueidislock's majority (rueidislock:<i>:key).
func lockKeys(ctx context.Context, admin *redis.Client, key string) []string {
	all, err := admin.Keys(ctx, "*"+key).Result()
	if err != nil {
		log.Fatal(err)
	}
	return slices.DeleteFunc(all, func(k string) bool { return k != key && !strings.HasSuffix(k, ":"+key) })
}

// idleCosts are the commands/s Redis runs while a client of an
// implementation holds a key and another client of it waits for it: all
// of them, then the waiter's client's and the holder's. Commands on a
// connection that neither dialed count in all only (the bench's own INFO,
// a connection left over from an earlier trial).
type idleCosts struct{ all, waiter, holder float64 }

// idleCost measures idleCosts over two windows of 15s, the holder's ttl 1
// minute: long enough that a client's PING a second (rueidis's, on each
// idle connection) counts the same whatever its phase. In the first, all
// from Redis's command counts; in the second, who sent what, through
// MONITOR, each connection known by its address as its client's dialer
// saw it (MONITOR slows Redis down, so the first window's figure is the
// one to compare when a client sends thousands a second).
func idleCost(admin *redis.Client, im impl) idleCosts {
	const window = 15 * time.Second
	addr := admin.Options().Addr
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder, holderDials := im.new(addr)
	defer holder.close()
	waiter, waiterDials := im.new(addr)
	defer waiter.close()
	key := "bench:free:idle:" + im.name + ":" + strconv.FormatInt(time.Now().UnixNano(), 36)
	unlock, err := holder.try(ctx, key, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if u, err := waiter.lock(wctx, key, lockTTL); err == nil {
			_ = u(context.Background())
		}
	}()
	time.Sleep(time.Second) // the waiter waits
	c0 := serverCalls(admin)
	time.Sleep(window)
	c := idleCosts{all: float64(serverCalls(admin)-c0-1) / window.Seconds()}
	stopMonitor := monitor(addr)
	time.Sleep(window)
	for a, n := range stopMonitor() {
		switch {
		case holderDials.dialed(a):
			c.holder += float64(n) / window.Seconds()
		case waiterDials.dialed(a):
			c.waiter += float64(n) / window.Seconds()
		}
	}
	stop()
	<-done
	_ = unlock(ctx)
	return c
}

// freeMatrix runs every way but the crash and the release on every server of
// PADLOCK_SERVERS, on padlock's drivers and padlock-polls, and prints a
// row per server.
func freeMatrix() {
	bins := filepath.SplitList(os.Getenv("PADLOCK_SERVERS"))
	if len(bins) == 0 {
		return
	}
	const trials = 3
	var ways []freeWay
	for _, way := range freeWays {
		if way.free != nil && way.name != "release" {
			ways = append(ways, way)
		}
	}
	var names []string
	type cell = []time.Duration
	results := map[string]map[string]cell{} // by server, by implementation
	var servers []string
	for _, bin := range bins {
		env := &benchEnv{}
		srv := redistest.Start(env, redistest.WithBinary(bin))
		admin := srv.Client()
		ims := append(padlockImpls(), pollingImpl(admin))
		server := filepath.Base(bin)
		servers = append(servers, server)
		results[server] = map[string]cell{}
		names = names[:0]
		for _, im := range ims {
			names = append(names, im.name)
			for round := range *rounds {
				for _, way := range ways {
					for trial := range trials {
						key := fmt.Sprintf("bench:free:%s:%s:%d:%d", im.name, way.name, round, trial)
						results[server][im.name] = append(results[server][im.name], freeOnce(srv.Addr(), admin, im, key, way, 100*time.Millisecond))
					}
				}
			}
		}
		_ = admin.Close()
		env.cleanup()
	}
	fmt.Printf("## The same on every server of the matrix: %s; %d rounds x %d trials per way, ms, median / max over the ways\n\n", strings.Join(wayNames(ways), ", "), *rounds, trials)
	fmt.Println("| server | " + strings.Join(names, " | ") + " |")
	fmt.Println("| --- |" + strings.Repeat(" ---: |", len(names)))
	for _, server := range servers {
		fmt.Printf("| %s |", server)
		for _, name := range names {
			fmt.Printf(" %s |", medianMax(results[server][name]))
		}
		fmt.Println()
	}
	fmt.Println()
}

// padlockImpls are the implementations of impls that are padlock's.
func padlockImpls() []impl {
	return slices.DeleteFunc(impls(), func(im impl) bool { return !isPadlock(im.name) })
}

// wayNames are the names of ways.
func wayNames(ways []freeWay) []string {
	var names []string
	for _, w := range ways {
		names = append(names, w.name)
	}
	return names
}
