package padlockrueidis_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/redistest"
	"github.com/padlock-go/padlock/padlockrueidis"
)

// The client settings the package doc calls harmless: padlock keeps its
// promises under each (a lock cycle with fences, a conflict, a waiter
// handed the lock by a message), and a value the caller cached with
// DoCache changes nothing padlock sees.
func TestHarmlessSettings(t *testing.T) {
	s := redistest.Start(t)
	tests := []struct {
		name string
		opt  rueidis.ClientOption
	}{
		{"defaults (client-side caching, OPTIN tracking)", rueidis.ClientOption{}},
		{"broadcast tracking of every key", rueidis.ClientOption{ClientTrackingOptions: []string{"BCAST"}}},
		{"DisableCache", rueidis.ClientOption{DisableCache: true}},
		{"DisableAutoPipelining", rueidis.ClientOption{DisableAutoPipelining: true}},
		{"AlwaysPipelining", rueidis.ClientOption{AlwaysPipelining: true}},
		{"AlwaysRESP2", rueidis.ClientOption{AlwaysRESP2: true, DisableCache: true}},
		{"PipelineMultiplex and MaxFlushDelay", rueidis.ClientOption{PipelineMultiplex: 3, MaxFlushDelay: 100 * time.Microsecond}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, tt.opt, s.Addr())
			a := padlockrueidis.New(c, padlock.WithFencing())
			defer a.Close()
			w := newWatched()
			b := padlockrueidis.New(newClient(t, tt.opt, s.Addr()), padlock.WithFencing(), padlock.WithObserver(w.observer()))
			defer b.Close()
			key := "settings:" + string(rune('a'+i))
			handOff(t, a, b, w, key, c)
			// Check probes every command (HELLO in the connection's own
			// protocol): the client goes on working after it.
			_, err := a.Check(context.Background(), key+":doctor")
			require.NoError(t, err)
			handOff(t, a, b, w, key, c)
		})
	}
}

// watched is what an observer of a Client saw: its waits starting (once
// subscribed, and asleep) and its hand-offs.
type watched struct {
	waiting  chan struct{}
	handOffs atomic.Int32
}

func newWatched() *watched { return &watched{waiting: make(chan struct{}, 16)} }

func (w *watched) observer() *padlock.Observer {
	return &padlock.Observer{
		WaitStart: func(context.Context, string) { w.waiting <- struct{}{} },
		HandOff:   func(string) { w.handOffs.Add(1) },
	}
}

// handOff takes key in a, has b (watched by w) wait for it, releases it,
// and checks that b got it by a message, with a higher fence; cache, if
// not nil, caches the key's value (DoCache) while a holds it, and reads it
// while b does.
func handOff(t *testing.T, a, b *padlock.Client, w *watched, key string, cache rueidis.Client) {
	t.Helper()
	ctx := context.Background()
	before := w.handOffs.Load()
	held, err := a.TryAcquire(ctx, key, time.Minute)
	require.NoError(t, err)
	var cached string
	if cache != nil {
		cached, err = cache.DoCache(ctx, cache.B().Get().Key(key).Cache(), time.Minute).ToString()
		require.NoError(t, err)
		assert.Contains(t, cached, held.Token())
	}
	_, err = b.TryAcquire(ctx, key, time.Minute)
	assert.ErrorIs(t, err, padlock.ErrNotAcquired)

	got := make(chan *padlock.Lock, 1)
	go func() {
		l, err := b.Acquire(ctx, key, time.Minute)
		assert.NoError(t, err)
		got <- l
	}()
	<-w.waiting
	require.NoError(t, held.Release(ctx))
	l := <-got
	require.NotNil(t, l)
	assert.Greater(t, l.Fence(), held.Fence())
	assert.Equal(t, before+1, w.handOffs.Load(), "handed off by a message")
	info, err := a.Inspect(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, l.Token(), info.Token)
	if cache != nil {
		// The invalidation is pushed to the client apart from the replies:
		// it may come a moment after the hand-off's reply.
		assert.Eventually(t, func() bool {
			now, err := cache.DoCache(ctx, cache.B().Get().Key(key).Cache(), time.Minute).ToString()
			return err == nil && strings.Contains(now, l.Token())
		}, 2*time.Second, 10*time.Millisecond, "the cache was told of the hand-off")
	}
	require.NoError(t, l.Release(ctx))
	again, err := a.TryAcquire(ctx, key, time.Minute)
	require.NoError(t, err, "free again")
	require.NoError(t, again.Release(ctx))
}
