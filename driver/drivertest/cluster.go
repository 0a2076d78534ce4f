package drivertest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock"
)

// clusterChecks run on the Cluster only.
var clusterChecks = []check{
	{"EveryMaster", everyMaster},
	{"SlotMoves", slotMoves},
}

// everyMaster: on a key of each master, a fenced lock, its hand-off by
// pub/sub and a semaphore's place; KeepAlive of a lock on every master at
// once (a batch split by node); and TryAcquireMany refuses keys of
// different slots.
func everyMaster(t *testing.T, p *part) {
	ctx := bounded(t)
	cs := p.clients(t, 2, padlock.WithFencing())
	keys := keysOnEveryMaster(t, p, key(t))
	var locks []*padlock.Lock
	for _, k := range keys {
		l, err := cs[0].TryAcquire(ctx, k, waitTTL)
		must(t, err, "TryAcquire %s", k)
		got, h := waitLater(t, ctx, cs[1], k, waitTTL)
		released := time.Now()
		must(t, l.Release(ctx), "Release %s", k)
		w := receive(t, got, "the waiter of "+k)
		promptHandOff(t, w, h, released, k)
		if w.l.Fence() <= l.Fence() {
			t.Errorf("%s: the waiter's fence %d, not above the holder's, %d", k, w.l.Fence(), l.Fence())
		}
		must(t, w.l.Release(ctx), "Release %s", k)
		place, err := cs[0].TryAcquire(ctx, k+":place", waitTTL, padlock.WithLimit(2))
		must(t, err, "a place of %s:place", k)
		must(t, place.Release(ctx), "Release of a place")
	}
	// Each kept alive from its acquire on (a lock taken in the loop
	// above could expire before the loop ended, on a loaded machine).
	var kctxs []context.Context
	for _, k := range keys {
		l, err := cs[1].TryAcquire(ctx, k, 600*time.Millisecond)
		must(t, err, "TryAcquire %s", k)
		locks = append(locks, l)
		kctx, stop := l.KeepAlive(ctx)
		defer stop()
		kctxs = append(kctxs, kctx)
	}
	time.Sleep(1500 * time.Millisecond) // two and a half ttls
	for i, kctx := range kctxs {
		if kctx.Err() != nil {
			t.Errorf("the KeepAlive of %s ended: %v", keys[i], context.Cause(kctx))
		}
	}
	for _, l := range locks {
		must(t, l.Release(ctx), "Release %s", l.Key())
	}
	_, err := cs[0].TryAcquireMany(ctx, keys, waitTTL, padlock.WithoutFencing())
	wantErr(t, err, padlock.ErrInvalid, "TryAcquireMany of keys on different masters")
}

// keysOnEveryMaster returns a key beginning with prefix, with a hash tag,
// on each master of the Cluster, in the order of p.nodes.
func keysOnEveryMaster(t testing.TB, p *part, prefix string) []string {
	t.Helper()
	cc := p.admin.(*redis.ClusterClient)
	keys := make([]string, len(p.nodes))
	found := 0
	for i := 0; found < len(keys); i++ {
		if i == 1000 {
			t.Fatalf("no key on every master among 1000: %q", keys)
		}
		k := "{" + prefix + ":" + strconv.Itoa(i) + "}"
		m, err := cc.MasterForKey(context.Background(), k)
		must(t, err, "the master of %s", k)
		for j, n := range p.nodes {
			if n.Addr() == m.Options().Addr && keys[j] == "" {
				keys[j] = k
				found++
			}
		}
	}
	return keys
}

// slotMoves: the slot of a lease kept alive WithReplicas, and waited for,
// moves to another master, as a resharding moves it: first its keys
// (the source answers ASK for them), then the slot (MOVED). The driver
// follows both, on its pinned connection (a write and its WAIT) and in
// its commands and batches: the lease is not lost, the waiter is served
// by the release on the new master, and the fence counter moved with it.
func slotMoves(t *testing.T, p *part) {
	ctx := bounded(t)
	k := keysOnEveryMaster(t, p, key(t))[0] // on nodes[0], which has a replica, as nodes[1] has
	holder := p.client(t, padlock.WithReplicas(1, time.Second), padlock.WithFencing())
	waiter := p.client(t, padlock.WithFencing())
	const ttl = 500 * time.Millisecond
	l, err := holder.TryAcquire(ctx, k, ttl)
	must(t, err, "TryAcquire WithReplicas")
	kctx, stop := l.KeepAlive(ctx)
	defer stop()
	got, h := waitLater(t, ctx, waiter, k, waitTTL)

	slot := migrateKeys(t, p, k)
	time.Sleep(2 * ttl) // renewals answered ASK
	if kctx.Err() != nil {
		t.Fatalf("the lease, while its keys are on the new master (ASK): %v", context.Cause(kctx))
	}
	moveSlot(t, p, slot)
	time.Sleep(2 * ttl) // renewals answered MOVED
	if kctx.Err() != nil {
		t.Fatalf("the lease, once its slot moved (MOVED): %v", context.Cause(kctx))
	}
	released := time.Now()
	must(t, l.Release(ctx), "Release on the new master")
	w := receive(t, got, "the waiter")
	promptHandOff(t, w, h, released, "the waiter of a moved slot")
	if w.l.Fence() <= l.Fence() {
		t.Errorf("the waiter's fence %d, not above the holder's, %d: the counter did not move with the slot", w.l.Fence(), l.Fence())
	}
	must(t, w.l.Release(ctx), "Release")
}

// migrateKeys moves every key of key's slot from nodes[0] to nodes[1],
// and leaves the slot migrating (nodes[0] answers ASK for them). It
// returns the slot.
func migrateKeys(t testing.TB, p *part, key string) int64 {
	t.Helper()
	ctx := context.Background()
	from, to := p.raw[p.nodes[0].Addr()], p.raw[p.nodes[1].Addr()]
	slot, err := from.ClusterKeySlot(ctx, key).Result()
	must(t, err, "CLUSTER KEYSLOT")
	fromID, err := from.Do(ctx, "CLUSTER", "MYID").Text()
	must(t, err, "CLUSTER MYID")
	toID, err := to.Do(ctx, "CLUSTER", "MYID").Text()
	must(t, err, "CLUSTER MYID")
	must(t, to.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID).Err(), "SETSLOT IMPORTING")
	must(t, from.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID).Err(), "SETSLOT MIGRATING")
	keys, err := from.ClusterGetKeysInSlot(ctx, int(slot), 100).Result()
	must(t, err, "CLUSTER GETKEYSINSLOT")
	args := []any{"MIGRATE", "127.0.0.1", p.nodes[1].Port(), "", 0, 5000, "KEYS"}
	for _, k := range keys {
		args = append(args, k)
	}
	must(t, from.Do(ctx, args...).Err(), "MIGRATE %q", keys)
	return slot
}

// moveSlot ends the migration of slot: nodes[1] owns it, on every master.
func moveSlot(t testing.TB, p *part, slot int64) {
	t.Helper()
	ctx := context.Background()
	toID, err := p.raw[p.nodes[1].Addr()].Do(ctx, "CLUSTER", "MYID").Text()
	must(t, err, "CLUSTER MYID")
	for _, n := range p.nodes {
		must(t, p.raw[n.Addr()].Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err(), "SETSLOT NODE on %s", n.Addr())
	}
}
