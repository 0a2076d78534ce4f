package drivertest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock/driver"
	"github.com/padlock-go/padlock/internal/redistest"
)

// freedSoon is how soon a waiter holds a key that something other than
// padlock freed: the watch (CLIENT TRACKING, or its 100ms poll) serves it
// within milliseconds; the ticket renewal alone, every 5s for waitTTL,
// would take seconds.
const freedSoon = time.Second

// freedByOthers: waiters of keys on every node are served soon after a
// DEL by hand frees each key, which padlock did not announce.
func freedByOthers(t *testing.T, p *part) {
	ctx := bounded(t)
	cs := p.clients(t, 2)
	const n = 6 // over several slots: on a Cluster, on every master
	var keys []string
	for i := range n {
		k := key(t) + ":" + strconv.Itoa(i)
		_, err := cs[0].TryAcquire(ctx, k, time.Minute)
		must(t, err, "TryAcquire %s", k)
		keys = append(keys, k)
	}
	for _, k := range keys {
		got, _ := waitLater(t, ctx, cs[1], k, waitTTL)
		time.Sleep(20 * time.Millisecond) // the watch reads the key
		freed := time.Now()
		must(t, p.admin.Del(ctx, k).Err(), "DEL %s", k)
		select {
		case w := <-got:
			must(t, w.err, "the waiter of %s", k)
			t.Logf("%s: served %v after the DEL", k, time.Since(freed).Round(time.Microsecond))
			must(t, w.l.Release(ctx), "Release")
		case <-time.After(freedSoon):
			t.Fatalf("the waiter of %s was not served within %v of a DEL", k, freedSoon)
		}
	}
}

// trackingIdle: on a server of its own, a waiter's Client reads nothing
// while nothing changes (its tracking connection does not poll), and is
// served soon after a DEL; a driver without tracking polls (10 reads a
// second) and is served as soon.
func trackingIdle(t *testing.T, p *part) {
	ctx := bounded(t)
	srv := p.srv.start(t)
	own := &part{setup: p.setup, dep: Deployment{Kind: driver.Single, Addrs: []string{srv.Addr()}}}
	holder, waiter := own.client(t), own.client(t)
	k := key(t)
	_, err := holder.TryAcquire(ctx, k, time.Minute)
	must(t, err, "TryAcquire")
	got, _ := waitLater(t, ctx, waiter, k, time.Minute)
	admin := srv.Client()
	time.Sleep(100 * time.Millisecond) // the watch opened its connection and read the key
	reads := func() int64 {
		return redistest.Calls(t, admin, "mget") + redistest.Calls(t, admin, "pttl") + redistest.Calls(t, admin, "exists")
	}
	before := reads()
	time.Sleep(time.Second)
	idle := reads() - before
	tracks := tracking(t, admin)
	t.Logf("reads of the key in 1s of waiting: %d (tracking: %v)", idle, tracks)
	if tracks && idle > 1 { // a ticket renewal's look may fall in the second
		t.Errorf("a waiter's Client read the keys %d times in 1s while nothing changed: it polls, despite tracking", idle)
	}
	freed := time.Now()
	must(t, admin.Del(ctx, k).Err(), "DEL")
	select {
	case w := <-got:
		must(t, w.err, "the waiter")
		t.Logf("served %v after the DEL", time.Since(freed).Round(time.Microsecond))
		must(t, w.l.Release(ctx), "Release")
	case <-time.After(freedSoon):
		t.Fatalf("the waiter was not served within %v of a DEL", freedSoon)
	}
}

// tracking reports whether a connection to the server of rdb has CLIENT
// TRACKING on (flag t in CLIENT LIST).
func tracking(t testing.TB, rdb *redis.Client) bool {
	t.Helper()
	list, err := rdb.ClientList(context.Background()).Result()
	must(t, err, "CLIENT LIST")
	for _, line := range strings.Split(list, "\n") {
		for _, f := range strings.Fields(line) {
			if flags, ok := strings.CutPrefix(f, "flags="); ok && strings.Contains(flags, "t") {
				return true
			}
		}
	}
	return false
}
