package padlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/redistest"
)

// BenchmarkTryAcquireRelease measures one uncontended lock cycle on a real
// redis-server, next to the hand-written go-redis equivalent (SET NX PX
// with a uuid token, then a compare-and-delete script) as the floor.
func BenchmarkTryAcquireRelease(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client()
	ctx := context.Background()
	c := padlock.New(rdb)
	fenced := padlock.New(rdb, padlock.WithFencing())
	del := redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

	b.Run("impl=padlock", func(b *testing.B) {
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
	b.Run("impl=padlock-fenced", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l, err := fenced.TryAcquire(ctx, "bench:lock", 10*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("impl=go-redis-floor", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			token := uuid.NewString()
			ok, err := rdb.SetNX(ctx, "bench:lock", token, 10*time.Second).Result()
			if err != nil || !ok {
				b.Fatal(ok, err)
			}
			if err := del.Run(ctx, rdb, []string{"bench:lock"}, token).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
