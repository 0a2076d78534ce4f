package drivertest

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock/driver"
)

// handOff: a waiter of another Client than the holder's is served by the
// release, through the pub/sub message that names it, promptly; twice, the
// second time on a new pub/sub connection (the first closes once no key
// uses it).
func handOff(t *testing.T, p *part) {
	ctx := bounded(t)
	cs := p.clients(t, 2)
	k := key(t)
	for round := range 2 {
		l, err := cs[0].TryAcquire(ctx, k, waitTTL)
		must(t, err, "round %d: TryAcquire", round)
		got, h := waitLater(t, ctx, cs[1], k, waitTTL)
		released := time.Now()
		must(t, l.Release(ctx), "round %d: Release", round)
		w := receive(t, got, "the waiter")
		promptHandOff(t, w, h, released, "round "+strconv.Itoa(round))
		must(t, w.l.Release(ctx), "round %d: the waiter's Release", round)
		time.Sleep(300 * time.Millisecond) // past the linger of the waiter's pub/sub connection
	}
}

// firstComeFirstServed: waiters of two Clients are served in the order
// they came, across the Clients.
func firstComeFirstServed(t *testing.T, p *part) {
	ctx := bounded(t)
	cs := p.clients(t, 3)
	k := key(t)
	l, err := cs[2].TryAcquire(ctx, k, waitTTL)
	must(t, err, "TryAcquire")
	const n = 4
	type turn struct {
		i   int
		err error
	}
	turns := make(chan turn, n)
	for i := range n {
		go func() {
			w, err := cs[i%2].Acquire(ctx, k, waitTTL, neverPoll)
			turns <- turn{i, err}
			if err == nil {
				_ = w.Release(context.Background())
			}
		}()
		waitQueued(t, cs[2], k, i+1)
	}
	must(t, l.Release(ctx), "Release")
	for want := range n {
		select {
		case got := <-turns:
			must(t, got.err, "waiter %d", got.i)
			if got.i != want {
				t.Errorf("served waiter %d, want %d: first come, first served", got.i, want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("waiter %d not served after 20s", want)
		}
	}
}

// pubsubIdle: a waiter that waits longer than its pub/sub connection's
// health check (a PING after 5s of silence, its answer within 5s more)
// keeps the one connection: the driver's Receive times out without
// breaking the connection, and hands padlock the PING's answer. On a
// server of its own, whose connections it counts. Skipped with -short.
func pubsubIdle(t *testing.T, p *part) {
	if testing.Short() {
		t.Skip("11s of waiting: skipped with -short")
	}
	ctx := bounded(t)
	srv := p.srv.start(t)
	own := &part{setup: p.setup, dep: Deployment{Kind: driver.Single, Addrs: []string{srv.Addr()}}}
	holder, waiter := own.client(t), own.client(t)
	k := key(t)
	l, err := holder.TryAcquire(ctx, k, time.Minute)
	must(t, err, "TryAcquire")
	got, h := waitLater(t, ctx, waiter, k, time.Minute)
	admin := srv.Client()
	var before []string
	if !eventually(5*time.Second, func() bool { before = subscribed(t, admin); return len(before) == 1 }) {
		t.Fatalf("connections subscribed to a channel: %v, want one, the waiter's", before)
	}
	time.Sleep(11 * time.Second)
	if after := subscribed(t, admin); !slices.Equal(after, before) {
		t.Errorf("connections subscribed after 11s: %v, want the same one as before, %v", after, before)
	}
	released := time.Now()
	must(t, l.Release(ctx), "Release")
	w := receive(t, got, "the waiter")
	promptHandOff(t, w, h, released, "after 11s")
	must(t, w.l.Release(ctx), "the waiter's Release")
}

// subscribed returns the ids of the connections of the server of rdb that
// are subscribed to a channel, plain or sharded.
func subscribed(t testing.TB, rdb *redis.Client) []string {
	t.Helper()
	list, err := rdb.ClientList(context.Background()).Result()
	must(t, err, "CLIENT LIST")
	var ids []string
	for _, line := range strings.Split(list, "\n") {
		var id string
		subs := 0
		for _, f := range strings.Fields(line) {
			name, v, _ := strings.Cut(f, "=")
			switch name {
			case "id":
				id = v
			case "sub", "ssub":
				n, _ := strconv.Atoi(v)
				subs += n
			}
		}
		if subs > 0 {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}
