package main

import (
	"context"
	"fmt"
	"log"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// free: on each implementation, a waiter blocked on a key held by
// another client of it holds the key once the key is free. How soon, from
// the moment the key is free to the moment the waiter holds it, for each
// way a key is freed: the holder crashed (ttl 1s, never released; free at
// its expiry), an operator's DEL of the key by hand, and a normal release.
// 5 trials per round, each on a key and two new clients of its own. Then
// the cost of waiting when nothing happens: the commands/s that Redis
// runs while one client holds a key (ttl 10s, no renewal of padlock's
// within the window) and one waits for it, for 5s.
func free(addr string) {
	const trials = 5
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	ways := []string{"crash", "DEL", "release"}
	type row struct {
		name  string
		waits map[string][]time.Duration
		idle  float64
	}
	var rows []row
	for _, im := range impls() {
		r := row{name: im.name, waits: map[string][]time.Duration{}}
		for round := range *rounds {
			for _, way := range ways {
				if way == "crash" && strings.HasPrefix(im.name, "rueidislock") {
					continue // its client keeps every lock alive until released: no holder to crash in-process
				}
				for trial := range trials {
					key := fmt.Sprintf("bench:free:%s:%s:%d:%d", im.name, way, round, trial)
					r.waits[way] = append(r.waits[way], freeOnce(addr, admin, im, key, way))
				}
			}
		}
		r.idle = idleCost(addr, admin, im)
		rows = append(rows, r)
	}
	fmt.Printf("## A waiter served when the key is free: %d rounds x %d trials per way; ms from the moment the key is free to the moment the waiter holds it, median / max\n\n", *rounds, trials)
	fmt.Println("| implementation | the holder crashed (ttl 1s) | `DEL` by hand | a normal release | commands/s, one holder and one idle waiter |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: |")
	for _, r := range rows {
		fmt.Printf("| %s |", r.name)
		for _, way := range ways {
			w := r.waits[way]
			if len(w) == 0 {
				fmt.Print(" — |")
				continue
			}
			slices.Sort(w)
			fmt.Printf(" %s / %s |", ms(w[len(w)/2]), ms(w[len(w)-1]))
		}
		fmt.Printf(" %.1f |\n", r.idle)
	}
	fmt.Println()
}

// freeOnce is one trial: a holder and a waiter, each a new client of im,
// on key, freed by way. It returns how soon the waiter held it.
func freeOnce(addr string, admin *redis.Client, im impl, key, way string) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder, _ := im.new(addr)
	defer holder.close()
	waiter, _ := im.new(addr)
	defer waiter.close()
	ttl := lockTTL
	if way == "crash" {
		ttl = time.Second
	}
	unlock, err := holder.try(ctx, key, ttl)
	if err != nil {
		log.Fatalf("free: %s: %v", im.name, err)
	}
	expires := time.Now().Add(ttl)
	held := make(chan time.Time, 1)
	go func() {
		unlockW, err := waiter.lock(ctx, key, lockTTL)
		at := time.Now()
		if err != nil {
			log.Fatalf("free: %s: the waiter: %v", im.name, err)
		}
		held <- at
		_ = unlockW(context.Background())
	}()
	time.Sleep(300 * time.Millisecond) // the waiter waits
	var freed time.Time
	switch way {
	case "crash":
		freed = expires
	case "DEL":
		keys := lockKeys(ctx, admin, key)
		freed = time.Now()
		if err := admin.Del(ctx, keys...).Err(); err != nil {
			log.Fatal(err)
		}
	case "release":
		freed = time.Now()
		if err := unlock(ctx); err != nil {
			log.Fatalf("free: %s: release: %v", im.name, err)
		}
	}
	select {
	case at := <-held:
		return at.Sub(freed)
	case <-ctx.Done():
		log.Fatalf("free: %s: the waiter was not served within a minute of a %s", im.name, way)
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

// idleCost is the commands/s Redis runs in 5s while a client of im holds a
// key and another waits for it.
func idleCost(addr string, admin *redis.Client, im impl) float64 {
	const window = 5 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder, _ := im.new(addr)
	defer holder.close()
	waiter, _ := im.new(addr)
	defer waiter.close()
	key := "bench:free:idle:" + im.name + ":" + strconv.FormatInt(time.Now().UnixNano(), 36)
	unlock, err := holder.try(ctx, key, lockTTL)
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
	calls := serverCalls(admin) - c0 - 1
	stop()
	<-done
	_ = unlock(ctx)
	return float64(calls) / window.Seconds()
}
