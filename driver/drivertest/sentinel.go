package drivertest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock"
)

// sentinelChecks run on the Sentinel deployment only, before its
// failover.
var sentinelChecks = []check{
	{"Replicas", replicas},
}

// replicas: WithReplicas(1) on the primary with one replica: TryAcquire
// returns once the replica has the lock; Extend, KeepAlive and a waiter
// of another Client wait for it too; WithReplicas(2) cannot be met, and
// takes nothing.
func replicas(t *testing.T, p *part) {
	ctx := bounded(t)
	cs := p.clients(t, 2, padlock.WithReplicas(1, time.Second))
	k := key(t)
	const ttl = 300 * time.Millisecond
	l, err := cs[0].TryAcquire(ctx, k, ttl, padlock.WithFencing())
	must(t, err, "TryAcquire WithReplicas(1)")
	replica := p.raw[p.nodes[1].Addr()]
	if v, err := replica.Get(ctx, k).Result(); err != nil || !strings.HasPrefix(v, l.Token()+" ") {
		t.Errorf("the replica has %q (%v) when TryAcquire returns, want the token %s", v, err, l.Token())
	}
	must(t, l.Extend(ctx, ttl), "Extend WithReplicas(1)")
	kctx, stop := l.KeepAlive(ctx)
	time.Sleep(3 * ttl)
	if kctx.Err() != nil {
		t.Fatalf("KeepAlive WithReplicas(1): %v", context.Cause(kctx))
	}
	got := acquireLater(ctx, cs[1], k, waitTTL)
	waitQueued(t, cs[0], k, 1)
	stop()
	must(t, l.Release(ctx), "Release")
	must(t, served(t, got, "the waiter, WithReplicas(1)").Release(ctx), "Release")
	_, err = cs[0].TryAcquire(ctx, k, waitTTL, padlock.WithReplicas(2, 200*time.Millisecond))
	wantErr(t, err, padlock.ErrNotReplicated, "TryAcquire WithReplicas(2) with one replica")
	if info, err := cs[0].Inspect(ctx, k); err != nil || info.Held {
		t.Errorf("an acquire that was not replicated left %+v, %v", info, err)
	}
}

// sentinelFailover: the Sentinel promotes the replica (SENTINEL FAILOVER)
// while a lock is held and a waiter of another Client waits. The driver
// follows the new primary: a new lock works on it, the holder's release
// reaches it, and the waiter, whose pub/sub connection followed it too,
// is served by that release's message; fences go on up.
func sentinelFailover(t *testing.T, p *part) {
	ctx := bounded(t)
	cs := p.clients(t, 2, padlock.WithFencing())
	k := key(t)
	l, err := cs[0].TryAcquire(ctx, k, 30*time.Second)
	must(t, err, "TryAcquire")
	got, h := waitLater(t, ctx, cs[1], k, 30*time.Second)
	primary, replica := p.raw[p.nodes[0].Addr()], p.raw[p.nodes[1].Addr()]
	must(t, primary.Do(ctx, "WAIT", 1, 5000).Err(), "WAIT for the replica") // it has the lock and the ticket

	// The Sentinel learns of the replica from the primary: at first it
	// may know none to promote.
	sc := p.sentinel.Client()
	var ferr error
	if !eventually(15*time.Second, func() bool { ferr = sc.Do(ctx, "SENTINEL", "FAILOVER", sentinelMaster).Err(); return ferr == nil }) {
		t.Fatalf("SENTINEL FAILOVER: %v", ferr)
	}
	if !eventually(15*time.Second, func() bool { return role(replica) == "master" }) {
		t.Fatal("the replica is not promoted 15s after SENTINEL FAILOVER")
	}
	// The Sentinel turns the old primary into a replica of the new when
	// it next looks at it (up to 10s): do it now, so that what is still
	// sent there is refused (READONLY).
	must(t, primary.Do(ctx, "REPLICAOF", "127.0.0.1", strconv.Itoa(p.nodes[1].Port())).Err(), "REPLICAOF on the old primary")
	var nl *padlock.Lock
	if !eventually(15*time.Second, func() bool { nl, err = cs[0].TryAcquire(ctx, k+":new", time.Minute); return err == nil }) {
		t.Fatalf("no new lock on the new primary 15s after the promotion: %v", err)
	}
	must(t, nl.Release(ctx), "Release of the new lock")
	time.Sleep(2 * time.Second) // padlock checks every second that its pub/sub connections follow the primary
	released := time.Now()
	must(t, l.Release(ctx), "Release on the new primary")
	w := receive(t, got, "the waiter")
	promptHandOff(t, w, h, released, "the waiter, after the failover")
	if w.l.Fence() <= l.Fence() {
		t.Errorf("the waiter's fence %d, not above the holder's, %d", w.l.Fence(), l.Fence())
	}
	must(t, w.l.Release(ctx), "Release")
	fresh, err := p.client(t, padlock.WithFencing()).TryAcquire(ctx, k, time.Minute)
	must(t, err, "TryAcquire by a new Client after the failover")
	if fresh.Fence() <= w.l.Fence() {
		t.Errorf("a new Client's fence %d, not above the last, %d", fresh.Fence(), w.l.Fence())
	}
	must(t, fresh.Release(ctx), "Release")
}

// role is what INFO replication says the server of rdb is: "master" or
// "slave".
func role(rdb *redis.Client) string {
	info, err := rdb.Info(context.Background(), "replication").Result()
	if err != nil {
		return ""
	}
	_, rest, _ := strings.Cut(info, "role:")
	r, _, _ := strings.Cut(rest, "\r\n")
	return r
}
