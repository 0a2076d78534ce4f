package padlock_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/redistest"
)

// startCluster starts a 3-master cluster and a ClusterClient for it.
func startCluster(t *testing.T) ([]*redistest.Server, *redis.ClusterClient) {
	t.Helper()
	nodes := redistest.StartClusterN(t, 3)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr())
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = cc.Close() })
	return nodes, cc
}

// Every operation works through a ClusterClient on a 3-master cluster, for
// keys on every master: the side keys (fence, queue) and the notification
// channel share the lock key's slot.
func TestClusterOperations(t *testing.T) {
	t.Parallel() // starts servers of its own; mostly waits
	nodes, cc := startCluster(t)
	ctx := patientCtx(t)
	c := padlock.New(cc, padlock.WithFencing())
	defer c.Close()

	owners := map[string]bool{}
	for _, key := range []string{"lock:a", "lock:b", "lock:c", "lock:d", "lock:{order}:42"} {
		owner, err := cc.MasterForKey(ctx, key)
		require.NoError(t, err)
		owners[owner.Options().Addr] = true

		l, err := c.TryAcquire(ctx, key, 300*time.Millisecond)
		require.NoError(t, err, key)
		assert.Equal(t, int64(1), l.Fence(), key)
		_, err = c.TryAcquire(ctx, key, time.Minute)
		require.ErrorIs(t, err, padlock.ErrNotAcquired, key)
		require.NoError(t, l.Extend(ctx, 300*time.Millisecond), key)
		_, err = l.TTL(ctx)
		require.NoError(t, err, key)
		kctx, stop := l.KeepAlive(ctx)
		time.Sleep(500 * time.Millisecond) // past the ttl
		require.NoError(t, kctx.Err(), "%s: kept alive", key)
		stop()
		// Held on while a waiter queues: a loaded machine's pauses do not
		// let it expire before its Release.
		require.NoError(t, l.Extend(ctx, time.Minute), key)

		// A waiter, woken by the release notification on the key's node.
		done := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			w, err := c.Acquire(wctx, key, time.Minute, neverPoll)
			if err == nil {
				if w.Fence() != 2 {
					t.Errorf("%s: waiter's fence %d, want 2", key, w.Fence())
				}
				err = w.Release(ctx)
			}
			done <- err
		}()
		time.Sleep(50 * time.Millisecond)
		require.NoError(t, l.Release(ctx), key)
		require.NoError(t, <-done, "%s: the waiter was woken by the release", key)

		info, err := c.Inspect(ctx, key)
		require.NoError(t, err)
		assert.Equal(t, int64(2), info.Fence, key)
		require.NoError(t, c.Do(ctx, key, 10*time.Second, func(context.Context) error { return nil }), key)

		// A semaphore and a shared hold: every key of theirs in the key's
		// slot (or the scripts fail with CROSSSLOT), waiters woken.
		for _, tt := range []struct {
			holder, waiter []padlock.Option
		}{
			{[]padlock.Option{padlock.WithLimit(1)}, []padlock.Option{padlock.WithLimit(1)}}, // a place after a place
			{[]padlock.Option{padlock.WithShared()}, nil},                                    // exclusive after a shared hold
		} {
			k := key + ":counted"
			// Held past its ttl by renewals, then for a minute while the
			// waiter queues: CI's -race run once let a 300ms lock expire
			// meanwhile.
			h, err := c.TryAcquire(ctx, k, 900*time.Millisecond, tt.holder...)
			require.NoError(t, err, k)
			kctx, stop := h.KeepAlive(ctx)
			time.Sleep(time.Second)
			require.NoError(t, kctx.Err(), "%s: kept alive", k)
			stop()
			require.NoError(t, h.Extend(ctx, time.Minute), k)
			done := make(chan error, 1)
			go func() {
				wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				w, err := c.Acquire(wctx, k, time.Minute, tt.waiter...)
				if err == nil {
					err = w.Release(ctx)
				}
				done <- err
			}()
			time.Sleep(50 * time.Millisecond)
			info, err := c.Inspect(ctx, k)
			require.NoError(t, err)
			assert.Len(t, info.Holders, 1, k)
			require.NoError(t, h.Release(ctx), k)
			require.NoError(t, <-done, "%s: the waiter got in", k)
			require.NoError(t, cc.Del(ctx, k).Err())
		}
	}
	assert.Len(t, owners, len(nodes), "the keys covered every master")
}

// The slot of a held lock moves to another master (as a resharding does).
// The lock, its ttl and its fence counter move with it; the holder sees
// nothing but go-redis following the redirect: its lease goes on, it
// releases normally, and fences keep going up.
func TestClusterSlotMovesWhileHeld(t *testing.T) {
	longOnly(t)
	t.Parallel() // starts servers of its own; mostly waits
	nodes, cc := startCluster(t)
	ctx := patientCtx(t)
	c := padlock.New(cc, padlock.WithFencing())
	defer c.Close()
	const key = "lock:{moving}"
	l, err := c.TryAcquire(ctx, key, time.Second)
	require.NoError(t, err)
	kctx, stop := l.KeepAlive(ctx)
	defer stop()

	to, keys := moveSlot(t, nodes, cc, key)
	require.Len(t, keys, 3, "the lock, its fence counter and its fence's record share the slot")

	time.Sleep(2 * time.Second) // two ttls: only renewals on the new master keep it
	require.NoError(t, kctx.Err(), "the lease survived the move: %v", context.Cause(kctx))
	owner, err := cc.MasterForKey(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, to.Addr(), owner.Options().Addr, "the slot moved")
	require.NoError(t, l.Release(ctx))
	next, err := c.TryAcquire(ctx, key, time.Second)
	require.NoError(t, err)
	assert.Equal(t, int64(2), next.Fence(), "the fence counter moved with the lock")
	require.NoError(t, next.Release(ctx))
}

// On a Cluster, a Client listens on one pub/sub connection, whatever the
// number of keys it waits for: 1,000 waiters on keys in every slot range
// open at most one pub/sub connection per master, and all are woken by
// their releases. A waiter whose key's slot moves to another master while
// it waits is still told of its grant by the release on the new owner.
func TestClusterWaitersShareOneConnection(t *testing.T) {
	longOnly(t)
	t.Parallel()
	nodes, cc := startCluster(t)
	ctx := patientCtx(t) // 1,000 Releases at once
	holders := padlock.New(cc)
	defer holders.Close()
	waiters := padlock.New(cc)
	defer waiters.Close()
	const n = 1000
	held := make([]*padlock.Lock, n)
	for i := range held {
		l, err := holders.TryAcquire(ctx, fmt.Sprintf("lock:cluster:%d", i), time.Minute)
		require.NoError(t, err)
		held[i] = l
	}
	got := make(chan error, n)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for i := range n {
		go func() {
			l, err := waiters.Acquire(wctx, fmt.Sprintf("lock:cluster:%d", i), time.Minute, neverPoll)
			if err == nil {
				err = l.Release(ctx)
			}
			got <- err
		}()
	}
	require.Eventually(t, func() bool {
		waiting := 0
		for _, l := range held {
			info, err := holders.Inspect(ctx, l.Key())
			require.NoError(t, err)
			waiting += info.Waiting
		}
		return waiting == n
	}, 30*time.Second, 100*time.Millisecond, "every waiter queued")
	total := 0
	for _, s := range nodes {
		list, err := s.Client().ClientList(ctx).Result()
		require.NoError(t, err)
		conns := strings.Count(list, "flags=P")
		t.Logf("%s: %d pub/sub connections", s.Addr(), conns)
		assert.LessOrEqual(t, conns, 1, "at most one pub/sub connection per master")
		total += conns
	}
	assert.Positive(t, total)

	// Move the slot of one waited key to another master.
	moveSlot(t, nodes, cc, held[0].Key())
	released := time.Now()
	require.NoError(t, held[0].Release(ctx), "released on the new owner")
	require.NoError(t, <-got)
	t.Logf("the waiter of the moved key held %v after the release", time.Since(released).Round(time.Millisecond))
	assert.Less(t, time.Since(released), 2*time.Second, "told by the release, not found at a renewal (every 2.5s)")

	for _, l := range held[1:] {
		require.NoError(t, l.Release(ctx))
	}
	for range n - 1 {
		require.NoError(t, <-got)
	}
}

// moveSlot moves the slot of key, with every key in it, from its master to
// another one, as a resharding does. It returns the new owner and the keys
// moved.
func moveSlot(t *testing.T, nodes []*redistest.Server, cc *redis.ClusterClient, key string) (*redistest.Server, []string) {
	t.Helper()
	m := migrateKeys(t, nodes, cc, key)
	for _, n := range nodes {
		require.NoError(t, n.Client().Do(t.Context(), "CLUSTER", "SETSLOT", m.slot, "NODE", m.toID).Err())
	}
	return m.to, m.keys
}

// A migration is a slot half moved: its keys are on to, and the slot is
// still the source's, MIGRATING to to (which answers ASK for them).
type migration struct {
	slot int
	to   *redistest.Server
	toID string
	keys []string
}

// migrateKeys moves the keys of key's slot to another master (the first of
// nodes that is not the slot's), and leaves the slot migrating (see
// moveSlot for the whole move).
func migrateKeys(t *testing.T, nodes []*redistest.Server, cc *redis.ClusterClient, key string) migration {
	t.Helper()
	ctx := t.Context()
	slot := int(cc.ClusterKeySlot(ctx, key).Val())
	src, err := cc.MasterForKey(ctx, key)
	require.NoError(t, err)
	var from, to *redistest.Server
	for _, n := range nodes {
		if n.Addr() == src.Options().Addr {
			from = n
		} else if to == nil {
			to = n
		}
	}
	fromC, toC := from.Client(), to.Client()
	fromID, toID := fromC.Do(ctx, "CLUSTER", "MYID").Val().(string), toC.Do(ctx, "CLUSTER", "MYID").Val().(string)
	require.NoError(t, toC.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID).Err())
	require.NoError(t, fromC.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID).Err())
	keys, err := fromC.ClusterGetKeysInSlot(ctx, slot, 100).Result()
	require.NoError(t, err)
	args := []any{"MIGRATE", "127.0.0.1", to.Port(), "", 0, 5000, "KEYS"}
	for _, k := range keys {
		args = append(args, k)
	}
	require.NoError(t, fromC.Do(ctx, args...).Err())
	return migration{slot: slot, to: to, toID: toID, keys: keys}
}
