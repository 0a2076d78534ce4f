package padlockrueidis_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock/internal/redistest"
)

// On one node, a waiter's tracking rides its Client's pub/sub connection:
// the one connection with tracking on is the one subscribed to the lock's
// channel, and a Client that tracks has no more connections than one
// that polls (a Redis user without +client|tracking). A DEL then serves
// both in turn.
func TestTrackingRidesThePubSubConnection(t *testing.T) {
	s := redistest.Start(t)
	ctx := context.Background()
	admin := s.Client()
	rule := leastACL(t)
	for user, extra := range map[string][]any{"tracks": {"+client|tracking"}, "polls": nil} {
		setUser := append(append([]any{"ACL", "SETUSER", user, "on", ">secret"}, rule...), extra...)
		require.NoError(t, admin.Do(ctx, setUser...).Err())
	}
	const key = "lock:rides"
	require.NoError(t, admin.Set(ctx, key, "someone else's", time.Minute).Err())

	served := make(chan error, 2)
	wctx, stop := context.WithTimeout(ctx, time.Minute)
	var wg sync.WaitGroup
	for _, user := range []string{"tracks", "polls"} {
		locks := newLocks(t, rueidis.ClientOption{Username: user, Password: "secret", DisableCache: true}, []string{s.Addr()})
		wg.Go(func() {
			l, err := locks.Acquire(wctx, key, time.Minute)
			if err == nil {
				err = l.Release(context.Background())
			}
			served <- err
		})
	}
	t.Cleanup(func() { stop(); wg.Wait() }) // before the Clients close

	// Both wait: each has a subscribed connection, and the one that may
	// track does.
	eventually(t, func() bool {
		conns := clientsByUser(t, admin)
		return len(tracked(conns["tracks"])) == 1 && len(subscribed(conns["polls"])) == 1 &&
			len(conns["tracks"]) == len(conns["polls"])
	})
	conns := clientsByUser(t, admin)
	on := tracked(conns["tracks"])
	require.Len(t, on, 1)
	assert.NotEmpty(t, subscribed(on), "the connection with tracking on is not the subscribed one: %v", on)
	assert.Len(t, conns["tracks"], len(conns["polls"]), "connections of a Client that tracks, and of one that polls")

	require.NoError(t, admin.Del(ctx, key).Err())
	for range 2 {
		select {
		case err := <-served:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("the waiters not served within 10s of a DEL")
		}
	}
}

// clientsByUser is CLIENT LIST's connections, each a map of its fields,
// by their user.
func clientsByUser(t *testing.T, admin *redis.Client) map[string][]map[string]string {
	t.Helper()
	list, err := admin.ClientList(context.Background()).Result()
	require.NoError(t, err)
	by := map[string][]map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		fields := map[string]string{}
		for _, f := range strings.Fields(line) {
			if k, v, ok := strings.Cut(f, "="); ok {
				fields[k] = v
			}
		}
		by[fields["user"]] = append(by[fields["user"]], fields)
	}
	return by
}

// tracked are the connections of conns with tracking on (flag t).
func tracked(conns []map[string]string) []map[string]string {
	var on []map[string]string
	for _, c := range conns {
		if strings.Contains(c["flags"], "t") {
			on = append(on, c)
		}
	}
	return on
}

// subscribed are the connections of conns subscribed to a channel, plain
// or sharded.
func subscribed(conns []map[string]string) []map[string]string {
	var subs []map[string]string
	for _, c := range conns {
		n, _ := strconv.Atoi(c["sub"])
		m, _ := strconv.Atoi(c["ssub"]) // Redis 7 and later
		if n+m > 0 {
			subs = append(subs, c)
		}
	}
	return subs
}

// A waiter that comes once its Client's pub/sub connection was closed
// idle, and with it the tracking it carried, while the watch lingers, is
// tracked again at once: its key is not polled.
func TestAWaiterAfterAnIdleCloseIsTracked(t *testing.T) {
	s := redistest.Start(t)
	ctx := context.Background()
	admin := s.Client()
	locks := newLocks(t, rueidis.ClientOption{DisableCache: true}, []string{s.Addr()})
	reads := func() int64 {
		return redistest.Calls(t, admin, "pttl") + redistest.Calls(t, admin, "exists") + redistest.Calls(t, admin, "mget")
	}
	for i, pause := range []time.Duration{0, 500 * time.Millisecond} {
		time.Sleep(pause) // the pub/sub connection closes 200ms after the last waiter; the watch stays 2s
		key := "idle-close:" + strconv.Itoa(i)
		require.NoError(t, admin.Set(ctx, key, "someone else's", time.Minute).Err())
		got := make(chan error, 1)
		go func() {
			l, err := locks.Acquire(ctx, key, time.Minute)
			if err == nil {
				err = l.Release(ctx)
			}
			got <- err
		}()
		eventually(t, func() bool { return len(subscribed(clientsByUser(t, admin)["default"])) == 1 })
		time.Sleep(300 * time.Millisecond) // its attempts' scripts (their EXISTS and PTTL count too) and the watch's first read
		before := reads()
		time.Sleep(time.Second)
		idle := reads() - before
		assert.LessOrEqual(t, idle, int64(2), "waiter %d: reads of the key in 1s of waiting (polled, it is 10; a ticket renewal's look may fall in it)", i)
		on := tracked(clientsByUser(t, admin)["default"])
		assert.Len(t, subscribed(on), 1, "waiter %d: the connection with tracking on is not the subscribed one: %v", i, on)
		require.NoError(t, admin.Del(ctx, key).Err())
		select {
		case err := <-got:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatalf("waiter %d not served within 5s of a DEL", i)
		}
	}
}
