package padlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/faultproxy"
	"github.com/padlock-go/padlock/internal/redistest"
)

// BenchmarkTryAcquireRelease measures one uncontended lock cycle on a real
// redis-server, next to the hand-written go-redis equivalent (SET NX PX
// with a uuid token, then a compare-and-delete script) as the floor.
// cadScript is the compare-and-delete release of a hand-written go-redis
// lock (the floor), as other libraries release.
const cadScript = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`

func BenchmarkTryAcquireRelease(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client()
	ctx := context.Background()
	c := padlock.New(rdb)
	fenced := padlock.New(rdb, padlock.WithFencing())
	del := rdb.ScriptLoad(ctx, cadScript).Val()

	for name, c := range map[string]*padlock.Client{"padlock": c, "padlock-fenced": fenced} {
		b.Run("impl="+name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				l, err := c.TryAcquire(ctx, "bench:lock", 10*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	// With a deadline, each round trip runs on a goroutine of its own, so
	// that the call returns by the deadline whatever Redis does (see
	// inflight.go): what that costs.
	b.Run("impl=padlock/ctx=deadline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			dctx, cancel := context.WithTimeout(ctx, time.Minute)
			l, err := c.TryAcquire(dctx, "bench:lock", 10*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(dctx); err != nil {
				b.Fatal(err)
			}
			cancel()
		}
	})
	b.Run("impl=go-redis-floor/ctx=deadline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			dctx, cancel := context.WithTimeout(ctx, time.Minute)
			token := uuid.New().String()
			ok, err := rdb.SetNX(dctx, "bench:lock", token, 10*time.Second).Result()
			if err != nil || !ok {
				b.Fatal(ok, err)
			}
			if err := rdb.EvalSha(dctx, del, []string{"bench:lock"}, token).Err(); err != nil {
				b.Fatal(err)
			}
			cancel()
		}
	})
	b.Run("impl=go-redis-floor", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			token := uuid.New().String()
			ok, err := rdb.SetNX(ctx, "bench:lock", token, 10*time.Second).Result()
			if err != nil || !ok {
				b.Fatal(ok, err)
			}
			if err := rdb.EvalSha(ctx, del, []string{"bench:lock"}, token).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkExtend measures one Extend round trip of a held lock.
func BenchmarkExtend(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	l, err := padlock.New(srv.Client()).TryAcquire(ctx, "bench:extend", time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Extend(ctx, time.Minute); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandoff measures one hand-off between two goroutines waiting
// for one key with Acquire: a release, the notification, the next attempt.
func BenchmarkHandoff(b *testing.B) {
	srv := redistest.Start(b)
	c := padlock.New(srv.Client())
	defer c.Close()
	ctx := context.Background()
	b.ReportAllocs()
	var wg sync.WaitGroup
	n := b.N
	for range 2 {
		wg.Go(func() {
			for range n / 2 {
				l, err := c.Acquire(ctx, "bench:handoff", 10*time.Second)
				if err != nil {
					b.Error(err)
					return
				}
				if err := l.Release(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TryAcquire + Release allocate at most 1.25 times what the hand-written
// go-redis lock does (SET NX PX with a uuid, then a compare-and-delete
// script): the price of plain code, not of a round trip. Counted against
// a real redis-server: miniredis would count its own allocations.
func TestTryAcquireReleaseAllocsNoMoreThanFloor(t *testing.T) {
	e := newReal(t, nil)
	ctx := context.Background()
	del := e.rdb.ScriptLoad(ctx, cadScript).Val() // the floor runs it as EVALSHA
	padlockAllocs := testing.AllocsPerRun(200, func() {
		l, err := e.c.TryAcquire(ctx, "allocs:lock", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
	floorAllocs := testing.AllocsPerRun(200, func() {
		token := uuid.New().String()
		if err := e.rdb.SetNX(ctx, "allocs:lock", token, 10*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
		if err := e.rdb.EvalSha(ctx, del, []string{"allocs:lock"}, token).Err(); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("allocs per TryAcquire+Release: padlock %.1f, go-redis floor %.1f", padlockAllocs, floorAllocs)
	if padlockAllocs > 1.25*floorAllocs {
		t.Errorf("padlock allocates %.1f per cycle, more than 1.25 times the floor's %.1f", padlockAllocs, floorAllocs)
	}
}

// BenchmarkRedlock compares one TryAcquire + Release on a Redlock of five
// redis-servers with the same on one of them: the nodes are asked in
// parallel, so the quorum should cost little more than one node. On
// loopback a round trip is all CPU, and five of them on a 2-core machine
// cannot overlap; with network latency (net=2ms: 1ms each way, added by a
// proxy in front of every node) they do.
func BenchmarkRedlock(b *testing.B) {
	e := startRedlock(b, 5)
	var slow []redis.UniversalClient
	for _, s := range e.srvs {
		p, err := faultproxy.Start(s.Addr())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(p.Close)
		p.SetLatency(time.Millisecond)
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
		b.Cleanup(func() { _ = rdb.Close() })
		slow = append(slow, rdb)
	}
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		c    *padlock.Client
	}{
		{"net=loopback/nodes=1", padlock.New(e.raws[0])},
		{"net=loopback/nodes=5", e.c},
		{"net=2ms/nodes=1", padlock.New(slow[0])},
		{"net=2ms/nodes=5", padlock.NewRedlock(slow)},
	} {
		b.Run(tt.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				l, err := tt.c.TryAcquire(ctx, "bench:redlock", 10*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
