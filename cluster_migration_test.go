package padlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/redistest"
)

// 64 goroutines take and release locks through one Client (so that its
// scripts go to the nodes in batches) while one slot moves from master to
// master again and again, keys and all, as a resharding moves it: its
// nodes answer ASK, then MOVED, and TRYAGAIN to a fenced acquire (two
// keys) that finds only one of them. Half the keys are in that slot, the
// others on every master, so that a batch holds commands that are
// redirected and commands that are not. No lock is ever held twice (run
// with -race: nothing in the go-redis adapter's batches races), and once
// the goroutines are done, every lock is gone from Redis: no key is left
// held by nobody (each lock's ttl is far longer than the test).
func TestClusterMigrationsUnderBatches(t *testing.T) {
	longOnly(t)
	t.Parallel() // starts servers of its own
	nodes, cc := startCluster(t)
	ctx := t.Context()
	c := padlock.New(cc)
	defer c.Close()

	const moving = "lock:{moving}"
	var keys []string
	for i := range 8 {
		keys = append(keys, fmt.Sprintf("%s:%d", moving, i), fmt.Sprintf("lock:still:%d", i))
	}
	holders := make(map[string]*atomic.Int32, len(keys))
	for _, k := range keys {
		holders[k] = new(atomic.Int32)
	}
	var taken, acquireErrs, releaseErrs atomic.Int64
	var mu sync.Mutex
	var errs []error // the Releases' errors: each one's release is retried
	stop := make(chan struct{})
	var workers sync.WaitGroup
	for g := range 64 {
		workers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := rand.IntN(len(keys))
				k := keys[i]
				var opts []padlock.Option
				if g%2 == 0 {
					opts = append(opts, padlock.WithFencing())
				}
				l, err := c.TryAcquire(ctx, k, time.Minute, opts...)
				if errors.Is(err, padlock.ErrNotAcquired) {
					continue
				}
				if err != nil {
					acquireErrs.Add(1) // TRYAGAIN (of a fenced acquire), refused unrun
					continue
				}
				taken.Add(1)
				if n := holders[k].Add(1); n != 1 {
					t.Errorf("%s held by %d at once", k, n)
				}
				time.Sleep(100 * time.Microsecond)
				holders[k].Add(-1)
				if err := l.Release(ctx); err != nil {
					releaseErrs.Add(1)
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}

	// The slot moves to each other master in turn, for two seconds: its
	// keys migrate (ASK), and 20ms later the slot follows (MOVED).
	slot := int(cc.ClusterKeySlot(ctx, moving).Val())
	owner, err := cc.MasterForKey(ctx, moving)
	require.NoError(t, err)
	from := 0
	for i, n := range nodes {
		if n.Addr() == owner.Options().Addr {
			from = i
		}
	}
	moves := 0
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); moves++ {
		to := (from + 1) % len(nodes)
		migrateSlot(t, nodes, slot, nodes[from], nodes[to], 20*time.Millisecond)
		from = to
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	workers.Wait()

	t.Logf("%d moves; %d locks taken, %d acquires failed, %d Releases failed (retried)", moves, taken.Load(), acquireErrs.Load(), releaseErrs.Load())
	require.Greater(t, taken.Load(), int64(100), "the workload ran")
	if len(errs) > 0 {
		t.Logf("first failed Release: %v", errs[0])
	}
	// A Release that failed (its slot was moving) is retried in the
	// background, every second at most, and lands now that the slot stays
	// put; one that failed for good would leave its key held by nobody.
	assert.Eventually(t, func() bool {
		for _, k := range keys {
			if n, err := cc.Exists(ctx, k).Result(); err != nil || n != 0 {
				return false
			}
		}
		return true
	}, 5*time.Second, 20*time.Millisecond, "every lock is released")
}

// A Release whose waiters queue in Redis, while its slot migrates away
// from the node that holds its keys: the node lacks the keys the release
// needs next (the waiter's ticket, the key once deleted), and failed the
// script half-way with "ERR Script attempted to access a non local key",
// which padlock did not retry: the key stayed held until its ttl (a token
// chosen with WithToken, whose minimums are read first), or was deleted
// (a semaphore's place freed) without its waiter being served. The release answers TRYAGAIN instead,
// before it writes anything, and is sent again until the slot has moved:
// then each waiter is handed its lock, and no key is left held.
func TestClusterReleaseDuringMigration(t *testing.T) {
	longOnly(t)
	t.Parallel() // starts servers of its own; mostly waits
	nodes, cc := startCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	holders := padlock.New(cc)
	defer holders.Close()
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr())
	}
	cc2 := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer cc2.Close()
	waiters := padlock.New(cc2)
	defer waiters.Close()

	// A lock, one whose token is chosen, and a place of a semaphore.
	keys := []string{"lock:{released}:plain", "lock:{released}:chosen", "lock:{released}:counted"}
	opts := [][]padlock.Option{nil, {padlock.WithToken("holder")}, {padlock.WithLimit(1)}}
	wopts := [][]padlock.Option{{neverPoll}, {neverPoll}, {neverPoll, padlock.WithLimit(1)}}
	var held []*padlock.Lock
	var got []<-chan waited
	for i, key := range keys {
		l, err := holders.Acquire(ctx, key, time.Minute, opts[i]...)
		require.NoError(t, err)
		held = append(held, l)
		got = append(got, acquireLater(ctx, waiters, key, time.Minute, wopts[i]...))
		waitForOn(t, holders, key, 1)
	}

	slot := int(cc.ClusterKeySlot(ctx, keys[0]).Val())
	owner, err := cc.MasterForKey(ctx, keys[0])
	require.NoError(t, err)
	var from, to *redistest.Server
	for _, n := range nodes {
		if n.Addr() == owner.Options().Addr {
			from = n
		} else if to == nil {
			to = n
		}
	}
	toID := startMigration(t, slot, from, to)
	for _, l := range held {
		err := l.Release(ctx)
		if err != nil { // the background sends it again
			assert.ErrorContains(t, err, "TRYAGAIN", "%s: released during the migration", l.Key())
		}
	}
	moveKeys(t, slot, from, to)
	endMigration(t, nodes, slot, toID)
	ended := time.Now()
	for i, key := range keys {
		w := <-got[i]
		require.NoError(t, w.err, "%s: the waiter got the lock", key)
		assert.Less(t, time.Since(ended), 3*time.Second, "%s: handed over by the release, not at the ttl", key)
		assert.NotEqual(t, held[i].Token(), w.l.Token())
		require.NoError(t, w.l.Release(ctx))
		n, err := cc.Exists(ctx, key).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "%s: no key left held", key)
	}
}

// migrateSlot moves slot from the master from to the master to, as a
// resharding does: the slot migrates, its keys move, and pause later the
// slot is to's on every master.
func migrateSlot(t *testing.T, nodes []*redistest.Server, slot int, from, to *redistest.Server, pause time.Duration) {
	t.Helper()
	toID := startMigration(t, slot, from, to)
	moveKeys(t, slot, from, to)
	time.Sleep(pause)
	endMigration(t, nodes, slot, toID)
}

// startMigration sets slot migrating from the master from to the master
// to (which imports it), and returns to's node ID.
func startMigration(t *testing.T, slot int, from, to *redistest.Server) string {
	t.Helper()
	ctx := t.Context()
	fromC, toC := from.Client(), to.Client()
	defer fromC.Close()
	defer toC.Close()
	fromID, err := fromC.Do(ctx, "CLUSTER", "MYID").Text()
	require.NoError(t, err)
	toID, err := toC.Do(ctx, "CLUSTER", "MYID").Text()
	require.NoError(t, err)
	require.NoError(t, toC.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID).Err())
	require.NoError(t, fromC.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID).Err())
	return toID
}

// moveKeys moves every key of the migrating slot from from to to.
func moveKeys(t *testing.T, slot int, from, to *redistest.Server) {
	t.Helper()
	ctx := t.Context()
	fromC := from.Client()
	defer fromC.Close()
	for {
		keys, err := fromC.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		require.NoError(t, err)
		if len(keys) == 0 {
			return
		}
		args := []any{"MIGRATE", "127.0.0.1", to.Port(), "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		require.NoError(t, fromC.Do(ctx, args...).Err())
	}
}

// endMigration makes slot the node toID's on every master (the importing
// one first).
func endMigration(t *testing.T, nodes []*redistest.Server, slot int, toID string) {
	t.Helper()
	for _, n := range nodes {
		rdb := n.Client()
		id, err := rdb.Do(t.Context(), "CLUSTER", "MYID").Text()
		if err == nil && id == toID {
			err = rdb.Do(t.Context(), "CLUSTER", "SETSLOT", slot, "NODE", toID).Err()
		}
		rdb.Close()
		require.NoError(t, err)
	}
	for _, n := range nodes {
		rdb := n.Client()
		err := rdb.Do(t.Context(), "CLUSTER", "SETSLOT", slot, "NODE", toID).Err()
		rdb.Close()
		require.NoError(t, err)
	}
}
