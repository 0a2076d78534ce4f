package padlockrueidis_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/redistest"
)

// crossRun is what the goroutines of TestGoRedisAndRueidisAreOneLock saw.
type crossRun struct {
	holders   atomic.Int32
	overlaps  atomic.Int32
	mu        sync.Mutex
	lastFence int64
	unordered int // fences not above the one before
	served    map[string]int
	perClient [2]int
}

// A go-redis Client and a rueidis Client of padlock on one key are one
// lock: 8 goroutines of each take it in turn, holding it 2ms, for 10s
// (PADLOCK_LONG; 2s otherwise). Nobody holds it with another, fences only
// go up, and the waiters are served in the order they were queued in
// Redis: a sampler reads the queue and, in the same script, how many were
// served, and every pair it saw queued is served in that order, the head
// next (after the holder, at most).
func TestGoRedisAndRueidisAreOneLock(t *testing.T) {
	run := 2 * time.Second
	if os.Getenv("PADLOCK_LONG") != "" {
		run = 10 * time.Second
	}
	s := redistest.Start(t)
	rdb := s.Client()
	clients := []*padlock.Client{
		padlock.New(rdb, padlock.WithFencing()),
		newLocks(t, rueidis.ClientOption{}, []string{s.Addr()}, padlock.WithFencing()),
	}
	defer clients[0].Close()
	const key = "cross"
	r := &crossRun{served: map[string]int{}}

	var wg sync.WaitGroup
	stop := time.Now().Add(run)
	for i, c := range clients {
		for range 8 {
			wg.Go(func() { r.takeTurns(t, rdb, c, i, key, stop) })
		}
	}
	snaps := sampleQueue(t, rdb, key, &wg)
	wg.Wait()

	total := r.perClient[0] + r.perClient[1]
	t.Logf("%d holds in %v (go-redis %d, rueidis %d); %d queue samples", total, run, r.perClient[0], r.perClient[1], len(snaps))
	assert.Zero(t, r.overlaps.Load(), "holders at once")
	assert.Zero(t, r.unordered, "fences not strictly increasing")
	assert.Positive(t, r.perClient[0])
	assert.Positive(t, r.perClient[1])
	pairs, longest := checkOrder(t, r.served, snaps)
	t.Logf("%d queued pairs seen in order; up to %d queued at once", pairs, longest)
}

// takeTurns takes key through c, as client i, until stop.
func (r *crossRun) takeTurns(t *testing.T, rdb *redis.Client, c *padlock.Client, i int, key string, stop time.Time) {
	ctx := context.Background()
	for time.Now().Before(stop) {
		token := newToken()
		l, err := c.Acquire(ctx, key, 5*time.Second, padlock.WithToken(token))
		if !assert.NoError(t, err) {
			return
		}
		if r.holders.Add(1) != 1 {
			r.overlaps.Add(1)
		}
		r.mu.Lock()
		if l.Fence() <= r.lastFence {
			r.unordered++
		}
		r.lastFence = l.Fence()
		r.perClient[i]++
		r.mu.Unlock()
		n, err := rdb.RPush(ctx, servedKey(key), token).Result()
		assert.NoError(t, err)
		r.mu.Lock()
		r.served[token] = int(n) - 1
		r.mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		r.holders.Add(-1)
		assert.NoError(t, l.Release(ctx))
	}
}

func servedKey(key string) string { return key + ":{" + key + "}:served" }

func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// A snapshot is the queue's tokens, by arrival, and how many holds had
// been recorded then.
type snapshot struct {
	queue  []string
	served int
}

// sampleQueue reads key's queue and the count of holds recorded, in one
// script, every millisecond until wg is done.
func sampleQueue(t *testing.T, rdb *redis.Client, key string, wg *sync.WaitGroup) []snapshot {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	script := redis.NewScript("return {redis.call('ZRANGE', KEYS[1], 0, -1), redis.call('LLEN', KEYS[2])}")
	keys := []string{key + ":{" + key + "}:queue", servedKey(key)}
	var snaps []snapshot
	for {
		select {
		case <-done:
			return snaps
		case <-time.After(time.Millisecond):
		}
		v, err := script.Run(context.Background(), rdb, keys).Slice()
		if !assert.NoError(t, err) {
			return snaps
		}
		var q []string
		for _, ticket := range v[0].([]any) {
			_, tok, _ := strings.Cut(ticket.(string), ":t:")
			q = append(q, tok)
		}
		if len(q) > 0 {
			snaps = append(snaps, snapshot{queue: q, served: int(v[1].(int64))})
		}
	}
}

// checkOrder checks that the tokens of each snapshot were served in its
// order, the first of them next but for the holder of that moment. It
// returns how many pairs it checked, and the longest queue.
func checkOrder(t assert.TestingT, served map[string]int, snaps []snapshot) (pairs, longest int) {
	for _, s := range snaps {
		longest = max(longest, len(s.queue))
		at := make([]int, len(s.queue))
		for i, tok := range s.queue {
			n, ok := served[tok]
			if !assert.True(t, ok, "a queued waiter was never served") {
				return pairs, longest
			}
			at[i] = n
		}
		if !assert.True(t, slices.IsSorted(at), "served out of their queue's order: %v", at) {
			return pairs, longest
		}
		pairs += len(at) - 1
		if !assert.LessOrEqual(t, at[0]-s.served, 1, "the head of the queue was overtaken") {
			return pairs, longest
		}
	}
	return pairs, longest
}

// errs counts the errors of checkOrder.
type errs struct{ n int }

func (e *errs) Errorf(string, ...any) { e.n++ }

// checkOrder finds a waiter served before one queued ahead of it, one
// served before the head of the queue besides its holder, and a queued
// waiter never served.
func TestCheckOrder(t *testing.T) {
	served := map[string]int{"h": 0, "a": 1, "b": 2, "c": 3}
	tests := []struct {
		name  string
		snaps []snapshot
		bad   bool
	}{
		{"in order", []snapshot{{[]string{"a", "b", "c"}, 0}, {[]string{"b", "c"}, 1}, {[]string{"c"}, 3}}, false},
		{"out of order", []snapshot{{[]string{"b", "a"}, 1}}, true},
		{"overtaken", []snapshot{{[]string{"c"}, 1}}, true},
		{"never served", []snapshot{{[]string{"a", "x"}, 1}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e errs
			checkOrder(&e, served, tt.snaps)
			assert.Equal(t, tt.bad, e.n > 0)
		})
	}
}
