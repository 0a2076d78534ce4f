package main

import (
	"context"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/redistest"
)

// Sizes of the list scenario: padlock locks, and keys padlock did not
// write.
const (
	listLocks  = 10000
	listOthers = 100000
)

// list: Client.Locks("*") over 10,000 padlock locks of every kind (held,
// fenced, with a minimum, semaphores, shared holds, multi-key, leaders,
// waited for) among 100,000 other keys, on the bench's redis-server and on
// a Cluster of three masters: how long one listing takes, and its round
// trips per 1,000 keys scanned.
func list(addr string) {
	fmt.Printf("## Listing: Locks(\"*\"), %d locks among %d other keys\n\n", listLocks, listOthers)
	fmt.Println("| deployment | locks listed | keys scanned | time per listing | round trips | round trips per 1,000 keys |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: |")
	rdb, cnt := countedClient(addr)
	listOn("one redis-server", rdb, rdb, cnt)
	_ = rdb.Close()

	env := &benchEnv{}
	defer env.cleanup()
	nodes := redistest.StartClusterN(env, 3)
	cnt = &counter{}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].Addr()}, PoolSize: 64})
	cc.AddHook(cnt)
	cc.OnNewNode(func(n *redis.Client) { n.AddHook(cnt) }) // Locks scans each master on its own client
	listOn("Cluster, 3 masters", cc, cc, cnt)
	_ = cc.Close()
	fmt.Println()
}

// listOn fills the deployment of rdb, lists it *rounds times, and prints
// the best round.
func listOn(name string, rdb redis.UniversalClient, admin redis.UniversalClient, cnt *counter) {
	ctx := context.Background()
	c, w := padlock.New(rdb), padlock.New(rdb)
	defer func() { _ = w.Close(); _ = c.Close() }()
	stop := fill(ctx, c, w, rdb)
	defer stop()
	keys := dbSize(ctx, admin)
	best, trips, listed := time.Duration(0), int64(0), 0
	for range *rounds {
		cnt.reset()
		start := time.Now()
		n := 0
		for _, err := range c.Locks(ctx, "*") {
			if err != nil {
				log.Fatal(err)
			}
			n++
		}
		took := time.Since(start)
		if best == 0 || took < best {
			best, trips, listed = took, cnt.trips.Load(), n
		}
	}
	fmt.Printf("| %s | %d | %d | %s | %d | %.2f |\n", name, listed, keys, ms(best)+" ms", trips, float64(trips)*1000/float64(keys))
}

// fill takes listLocks locks of every kind through c (waiters in w) and
// writes listOthers other keys; stop ends the waits and the leaderships.
func fill(ctx context.Context, c, w *padlock.Client, rdb redis.UniversalClient) (stop func()) {
	var wg sync.WaitGroup
	jobs := make(chan int)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if err := takeOne(ctx, c, i); err != nil {
					log.Fatal(err)
				}
			}
		}()
	}
	for i := range listLocks - 200 {
		jobs <- i
	}
	close(jobs)
	wg.Wait()

	wctx, cancel := context.WithCancel(ctx)
	var lds []*padlock.Leadership
	for i := range 100 {
		ld, err := c.Campaign(ctx, fmt.Sprintf("bench:list:leader:%d", i), time.Minute, "leader")
		if err != nil {
			log.Fatal(err)
		}
		lds = append(lds, ld)
		key := fmt.Sprintf("bench:list:waited:%d", i)
		if _, err := c.TryAcquire(ctx, key, time.Minute); err != nil {
			log.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = w.Acquire(wctx, key, time.Minute)
		}()
	}
	pipe := rdb.Pipeline()
	for i := range listOthers {
		key := fmt.Sprintf("bench:other:%d", i)
		switch i % 4 {
		case 0:
			pipe.Set(ctx, key, "cached value", time.Hour)
		case 1:
			pipe.HSet(ctx, key, "f", "v")
		case 2:
			pipe.ZAdd(ctx, key, redis.Z{Score: 1, Member: "m"})
		case 3:
			pipe.Set(ctx, key, "x", 0)
		}
		if pipe.Len() == 1000 {
			if _, err := pipe.Exec(ctx); err != nil {
				log.Fatal(err)
			}
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		log.Fatal(err)
	}
	return func() {
		cancel()
		wg.Wait()
		for _, ld := range lds {
			_ = ld.Resign(context.Background())
		}
	}
}

// takeOne takes lock number i of the list scenario, of the kind i says.
func takeOne(ctx context.Context, c *padlock.Client, i int) error {
	key := fmt.Sprintf("bench:list:%d", i)
	var err error
	switch i % 6 {
	case 0:
		_, err = c.TryAcquire(ctx, key, time.Minute, padlock.WithMetadata("host=web-1"))
	case 1:
		_, err = c.TryAcquire(ctx, key, time.Minute, padlock.WithFencing())
	case 2:
		_, err = c.TryAcquire(ctx, key, time.Minute, padlock.WithMinHold(time.Minute))
	case 3:
		for range 2 {
			if _, err = c.TryAcquire(ctx, key, time.Minute, padlock.WithLimit(3)); err != nil {
				break
			}
		}
	case 4:
		for range 2 {
			if _, err = c.TryAcquire(ctx, key, time.Minute, padlock.WithShared()); err != nil {
				break
			}
		}
	case 5:
		_, err = c.TryAcquireMany(ctx, []string{"{" + key + "}:a", "{" + key + "}:b"}, time.Minute)
	}
	return err
}

// dbSize is how many keys the deployment of admin holds: on a Cluster,
// the sum over its masters.
func dbSize(ctx context.Context, admin redis.UniversalClient) int64 {
	cc, ok := admin.(*redis.ClusterClient)
	if !ok {
		return admin.DBSize(ctx).Val()
	}
	var mu sync.Mutex
	var n int64
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		n += m.DBSize(ctx).Val()
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	return n
}
