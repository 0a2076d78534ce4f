package padlockrueidis_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/redistest"
)

// On one node, a waiter's tracking rides its Client's pub/sub connection:
// the Client's one connection with tracking on is the one subscribed to
// the lock's channel (with rueidis's cache off, its other connections
// track nothing). A DEL then serves the waiter.
func TestTrackingRidesThePubSubConnection(t *testing.T) {
	s := redistest.Start(t)
	ctx := context.Background()
	admin := s.Client()
	rule := append(leastACL(t), "+client|tracking")
	require.NoError(t, admin.Do(ctx, append([]any{"ACL", "SETUSER", "tracks", "on", ">secret"}, rule...)...).Err())
	const key = "lock:rides"
	require.NoError(t, admin.Set(ctx, key, "someone else's", time.Minute).Err())

	locks := newLocks(t, rueidis.ClientOption{Username: "tracks", Password: "secret", DisableCache: true}, []string{s.Addr()})
	got := acquireLater(locks, key)
	eventually(t, func() bool {
		conns := clientsByUser(t, admin)["tracks"]
		return len(tracked(conns)) > 0 && len(subscribed(conns)) > 0
	})
	conns := clientsByUser(t, admin)["tracks"]
	on := tracked(conns)
	assert.Len(t, on, 1, "connections with tracking on")
	assert.Len(t, subscribed(conns), 1, "subscribed connections")
	assert.Len(t, subscribed(on), 1, "the connection with tracking on is not the subscribed one: %v", conns)

	delServes(t, admin, key, got, 10*time.Second, "the waiter")
}

// delServes deletes key and requires that the waiter whose Acquire
// reports on got is served within limit.
func delServes(t *testing.T, admin *redis.Client, key string, got <-chan error, limit time.Duration, who string) {
	t.Helper()
	require.NoError(t, admin.Del(context.Background(), key).Err())
	select {
	case err := <-got:
		require.NoError(t, err, who)
	case <-time.After(limit):
		t.Fatalf("%s not served within %v of a DEL", who, limit)
	}
}

// acquireLater has locks acquire key for a minute, and release it, on a
// goroutine of its own, and returns what that came to.
func acquireLater(locks *padlock.Client, key string) <-chan error {
	got := make(chan error, 1)
	go func() {
		ctx := context.Background()
		l, err := locks.Acquire(ctx, key, time.Minute)
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	return got
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
		if channels(c) > 0 {
			subs = append(subs, c)
		}
	}
	return subs
}

// channels is how many channels, plain or sharded, connection c is
// subscribed to.
func channels(c map[string]string) int {
	n, _ := strconv.Atoi(c["sub"])
	m, _ := strconv.Atoi(c["ssub"]) // Redis 7 and later
	return n + m
}

// A waiter that comes once its Client's pub/sub closed idle, while the
// watch lingers, is still tracked, on the connection it subscribes on: its
// key is not polled. That connection holds its channel alone: the pub/sub
// that left unsubscribed its own.
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
		got := acquireLater(locks, key)
		eventually(t, func() bool { return len(subscribed(clientsByUser(t, admin)["default"])) == 1 })
		time.Sleep(300 * time.Millisecond) // its attempts' scripts (their EXISTS and PTTL count too) and the watch's first read
		before := reads()
		time.Sleep(time.Second)
		idle := reads() - before
		assert.LessOrEqual(t, idle, int64(2), "waiter %d: reads of the key in 1s of waiting (polled, it is 10; a ticket renewal's look may fall in it)", i)
		on := subscribed(tracked(clientsByUser(t, admin)["default"]))
		if assert.Len(t, on, 1, "waiter %d: the connection with tracking on is not the subscribed one", i) {
			assert.Equal(t, 1, channels(on[0]), "waiter %d: channels of the shared connection: %v", i, on[0])
		}
		delServes(t, admin, key, got, 5*time.Second, "waiter "+strconv.Itoa(i))
	}
}

// A shared connection that is cut (CLIENT KILL) takes the pub/sub and the
// tracking with it; both come back, on one connection again, and a DEL
// then serves the waiter.
func TestASharedConnectionCutComesBack(t *testing.T) {
	s := redistest.Start(t)
	ctx := context.Background()
	admin := s.Client()
	locks := newLocks(t, rueidis.ClientOption{DisableCache: true}, []string{s.Addr()})
	const key = "cut"
	require.NoError(t, admin.Set(ctx, key, "someone else's", time.Minute).Err())
	got := acquireLater(locks, key)
	shared := func() []map[string]string {
		return subscribed(tracked(clientsByUser(t, admin)["default"]))
	}
	eventually(t, func() bool { return len(shared()) == 1 })
	cut := shared()[0]
	require.NoError(t, admin.Do(ctx, "CLIENT", "KILL", "ID", cut["id"]).Err())
	eventually(t, func() bool { on := shared(); return len(on) == 1 && on[0]["id"] != cut["id"] })
	assert.Len(t, tracked(clientsByUser(t, admin)["default"]), 1, "connections with tracking on, once back")

	delServes(t, admin, key, got, 5*time.Second, "the waiter")
}
