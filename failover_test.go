package padlock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/faultproxy"
	"github.com/padlock-go/padlock/internal/redistest"
)

// role is what INFO replication says a server is: "master" or "slave".
func role(t *testing.T, rdb *redis.Client) string {
	info, err := rdb.Info(context.Background(), "replication").Result()
	if err != nil {
		return ""
	}
	_, rest, _ := strings.Cut(info, "role:")
	r, _, _ := strings.Cut(rest, "\r\n")
	return r
}

// A graceful CLUSTER FAILOVER (a managed Redis's maintenance window) moves
// a shard's slots to its replica while a WithReplicas lease is kept alive
// and waiters wait: the old master answers MOVED, which padlock follows to
// the new master. The lease is not lost, no Acquire fails with MOVED, and
// every waiter is served within a second of each release.
func TestClusterFailoverKeepsAWithReplicasLease(t *testing.T) {
	longOnly(t)
	t.Parallel() // starts servers of its own; mostly waits
	primary := redistest.StartCluster(t)
	replica := redistest.StartClusterReplica(t, primary)
	// Each Client on a ClusterClient of its own: the holder's slot map is
	// refreshed by nothing but its own calls.
	cluster := func() *redis.ClusterClient {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{primary.Addr(), replica.Addr()}})
		t.Cleanup(func() { _ = cc.Close() })
		return cc
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	opts := []padlock.Option{padlock.WithReplicas(1, time.Second), padlock.WithFencing()}
	holder := padlock.New(cluster(), opts...)
	defer holder.Close()
	const key, ttl = "lock:{failover}", time.Second
	l, err := holder.Acquire(ctx, key, ttl)
	require.NoError(t, err)
	kctx, stop := l.KeepAlive(ctx)
	defer stop()

	const n = 3
	waiters := padlock.New(cluster(), opts...)
	defer waiters.Close()
	type served struct {
		at  time.Time
		err error
	}
	got := make(chan served, n)
	for range n {
		go func() {
			l, err := waiters.Acquire(ctx, key, ttl)
			if err == nil {
				time.Sleep(100 * time.Millisecond)
				err = l.Release(context.Background())
			}
			got <- served{time.Now(), err}
		}()
	}
	waitForOn(t, holder, key, n)

	require.NoError(t, replica.Client().Do(ctx, "CLUSTER", "FAILOVER").Err())
	require.Eventually(t, func() bool { return role(t, replica.Client()) == "master" && role(t, primary.Client()) == "slave" },
		10*time.Second, 20*time.Millisecond, "the replica took over")
	// The old master resyncs as a replica: WithReplicas has its replica again.
	require.Eventually(t, func() bool {
		info, _ := replica.Client().Info(ctx, "replication").Result()
		return strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
	}, 10*time.Second, 20*time.Millisecond)

	time.Sleep(2 * ttl) // renewals now reach only the new master
	require.NoError(t, kctx.Err(), "the lease survived the failover: %v", context.Cause(kctx))
	released := time.Now()
	require.NoError(t, l.Release(ctx))
	last := released
	for range n {
		s := <-got
		require.NoError(t, s.err, "no Acquire fails with MOVED")
		require.False(t, errors.Is(s.err, padlock.ErrNotAcquired))
		require.Less(t, s.at.Sub(last), time.Second+100*time.Millisecond, "served within a second of the release before it")
		last = s.at
	}
}

// After a graceful SENTINEL FAILOVER, the waiters' Client listens on the
// new primary within a second: go-redis moves its command connections, not
// (in recent versions) its pub/sub ones, which would hear grants only at
// the tickets' renewals. The holder releases 2s after the promotion; the
// first of 20 waiters of another Client is served within 300ms of the
// release, and all 20 in turn, each within 300ms of the one before.
func TestSentinelFailoverMovesTheSubscription(t *testing.T) {
	longOnly(t)
	t.Parallel() // starts servers of its own; mostly waits
	primary := redistest.Start(t)
	replica := redistest.StartReplica(t, primary)
	sentinel := redistest.StartSentinel(t, primary, "padlock")
	failover := func() *redis.Client {
		rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "padlock", SentinelAddrs: []string{sentinel.Addr()}})
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	holders, waiters := padlock.New(failover()), padlock.New(failover())
	defer holders.Close()
	defer waiters.Close()
	const key, ttl, n = "lock:sentinel", 10 * time.Second, 20
	l, err := holders.Acquire(ctx, key, ttl)
	require.NoError(t, err)

	got := make(chan time.Time, n)
	errs := make(chan error, n)
	for range n {
		go func() {
			l, err := waiters.Acquire(ctx, key, ttl)
			if err == nil {
				got <- time.Now()
				err = l.Release(context.Background())
			}
			errs <- err
		}()
	}
	waitForOn(t, holders, key, n)

	// Sentinel learns of the replica from the primary's INFO: it may not
	// know one to promote at first.
	sc := sentinel.Client()
	require.Eventually(t, func() bool {
		return sc.Do(ctx, "SENTINEL", "FAILOVER", "padlock").Err() == nil
	}, 15*time.Second, 100*time.Millisecond, "SENTINEL FAILOVER accepted")
	require.Eventually(t, func() bool { return role(t, replica.Client()) == "master" },
		15*time.Second, 20*time.Millisecond, "the replica was promoted")

	time.Sleep(2 * time.Second)
	released := time.Now()
	require.NoError(t, l.Release(ctx))
	// Each waiter releases as soon as it has the lock: each hand-off is
	// heard by message, not at a ticket's renewal (every 2.5s).
	last := released
	for i := range n {
		at := <-got
		require.Less(t, at.Sub(last), 300*time.Millisecond, "waiter %d heard its grant on the new primary", i+1)
		last = at
	}
	for range n {
		require.NoError(t, <-errs)
	}
	// A ticket's renewal could serve one such hand-off in time by chance
	// (one in eight): four more, each with one waiter, cannot all be.
	for round := range 4 {
		l, err := holders.TryAcquire(ctx, key, ttl)
		require.NoError(t, err)
		got := acquireLater(ctx, waiters, key, ttl)
		waitForOn(t, holders, key, 1)
		released := time.Now()
		require.NoError(t, l.Release(ctx))
		w := <-got
		require.NoError(t, w.err)
		require.Less(t, time.Since(released), 300*time.Millisecond, "round %d: heard on the new primary", round)
		require.NoError(t, w.l.Release(ctx))
	}
}

// A hold is one successful Acquire of the workload: when it returned, its
// fence, and when its Release was sent.
type hold struct {
	start, end time.Time
	fence      int64
}

// Sentinel failovers that lose writes: the replica is cut off from the
// primary (its link blackholed), and 300ms later the primary is SIGKILLed;
// Sentinel promotes the replica, which lacks what the primary took since
// the cut. With WithReplicas, no lock was handed out that the replica
// lacked: holds never overlap and fences never go back, across the
// failovers (one; three in the long mode), and every Acquire returns.
func TestSentinelLossyFailoverWithReplicas(t *testing.T) {
	longOnly(t)
	t.Parallel() // starts servers of its own; mostly waits
	rounds := 1
	if longRun() {
		rounds = 3
	}
	// A primary waits 5s by default before a diskless full sync, for more
	// replicas to join: each resync of a replica coming back would wait.
	quick := redistest.WithArgs("--repl-diskless-sync-delay", "0")
	servers := [2]*redistest.Server{redistest.Start(t, quick), nil}
	// link starts (or points) servers[1-i] as a replica of servers[i],
	// through a proxy that can cut it off.
	link := func(i int, replica *redistest.Server) (*redistest.Server, *faultproxy.Proxy) {
		p, err := faultproxy.Start(servers[i].Addr())
		require.NoError(t, err)
		t.Cleanup(p.Close)
		_, port, _ := strings.Cut(p.Addr(), ":")
		if replica == nil {
			replica = redistest.Start(t, quick, redistest.WithArgs("--replicaof", "127.0.0.1", port))
		} else {
			require.NoError(t, replica.Client().SlaveOf(t.Context(), "127.0.0.1", port).Err())
		}
		require.Eventually(t, func() bool {
			info, _ := replica.Client().Info(t.Context(), "replication").Result()
			return strings.Contains(info, "master_link_status:up")
		}, 20*time.Second, 20*time.Millisecond, "the replica is in sync")
		return replica, p
	}
	var proxy *faultproxy.Proxy
	servers[1], proxy = link(0, nil)
	sentinel := redistest.StartSentinel(t, servers[0], "padlock")

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	const key, ttl = "lock:lossy", time.Second
	var mu sync.Mutex
	var holds []hold
	var slow []time.Duration // Acquires that returned after their ctx's deadline and a second
	var workers sync.WaitGroup
	for range 4 {
		rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "padlock", SentinelAddrs: []string{sentinel.Addr()},
			ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond})
		t.Cleanup(func() { _ = rdb.Close() })
		c := padlock.New(rdb, padlock.WithReplicas(1, 200*time.Millisecond), padlock.WithFencing())
		t.Cleanup(func() { _ = c.Close() })
		workers.Go(func() {
			for ctx.Err() == nil {
				actx, acancel := context.WithTimeout(ctx, 2*time.Second)
				called := time.Now()
				l, err := c.Acquire(actx, key, ttl)
				acancel()
				if took := time.Since(called); took > 3*time.Second {
					mu.Lock()
					slow = append(slow, took)
					mu.Unlock()
				}
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				h := hold{start: time.Now(), fence: l.Fence()}
				time.Sleep(5 * time.Millisecond)
				h.end = time.Now()
				_ = l.Release(context.Background())
				mu.Lock()
				holds = append(holds, h)
				mu.Unlock()
			}
		})
	}
	master := 0
	for round := range rounds {
		time.Sleep(time.Second) // hand-offs under load
		proxy.SetBlackhole(true)
		time.Sleep(300 * time.Millisecond)
		servers[master].Kill()
		replica := servers[1-master]
		require.Eventually(t, func() bool { return role(t, replica.Client()) == "master" },
			20*time.Second, 50*time.Millisecond, "round %d: the replica was promoted", round)
		mu.Lock()
		before := len(holds)
		mu.Unlock()
		// The killed one comes back, empty, as the new primary's replica:
		// until then WithReplicas(1) takes nothing.
		old := servers[master]
		old.Restart()
		master = 1 - master
		_, proxy = link(master, old)
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(holds) > before+10
		}, 10*time.Second, 20*time.Millisecond, "round %d: locks are taken on the new primary", round)
	}
	time.Sleep(time.Second)
	cancel()
	workers.Wait()

	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, slow, "every Acquire returned by its deadline")
	require.Greater(t, len(holds), 50, "the workload ran")
	slices.SortFunc(holds, func(a, b hold) int { return a.start.Compare(b.start) })
	for i := 1; i < len(holds); i++ {
		prev, h := holds[i-1], holds[i]
		require.False(t, h.start.Before(prev.end), "hold %d (fence %d) overlaps the one before (fence %d)", i, h.fence, prev.fence)
		require.Greater(t, h.fence, prev.fence, "hold %d: fences never go back", i)
	}
	t.Logf("%d holds over %d failovers", len(holds), rounds)
}

// A slot being migrated (a resharding) answers ASK for the keys already
// moved: a WithReplicas lease's renewals follow it, with ASKING, to the
// importing master, and the lease lives on through the migration and the
// MOVED after it; a WithReplicas TryAcquire of a key in the slot follows
// ASK too. The importing master is one the Cluster client knows, then one
// just added (CLUSTER MEET), which owns no slot and is in no slot map
// while the first slot migrates to it.
func TestClusterMigrationKeepsAWithReplicasLease(t *testing.T) {
	if !longRun() {
		t.Skip("eight servers: the long mode (PADLOCK_LONG=1) runs it")
	}
	t.Parallel() // starts servers of its own; mostly waits
	nodes := redistest.StartClusterN(t, 3)
	var addrs []string
	for _, n := range nodes {
		redistest.StartClusterReplica(t, n)
		addrs = append(addrs, n.Addr())
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = cc.Close() })
	c := padlock.New(cc, padlock.WithReplicas(1, time.Second), padlock.WithFencing())
	defer c.Close()

	t.Run("to a known master", func(t *testing.T) {
		migrationKeepsLease(t, c, cc, nodes, "lock:{asked}")
	})
	t.Run("to a just-added master", func(t *testing.T) {
		added := redistest.StartClusterMaster(t, nodes...)
		redistest.StartClusterReplica(t, added)
		// migrateKeys moves the keys to the first of the nodes that is
		// not the slot's master.
		to := migrationKeepsLease(t, c, cc, append([]*redistest.Server{added}, nodes...), "lock:{joined}")
		require.Equal(t, added.Addr(), to.Addr())
	})
}

// migrationKeepsLease holds key with c, kept alive, while its slot
// migrates to another of nodes (the masters), and returns that master.
func migrationKeepsLease(t *testing.T, c *padlock.Client, cc *redis.ClusterClient, nodes []*redistest.Server, key string) *redistest.Server {
	ctx := patientCtx(t)
	const ttl = time.Second
	l, err := c.Acquire(ctx, key, ttl)
	require.NoError(t, err)
	kctx, stop := l.KeepAlive(ctx)
	defer stop()

	// The keys move, then (2 ttls later) the slot.
	m := migrateKeys(t, nodes, cc, key)
	// A key not on the source is asked for: an acquire (of one key, so
	// not fenced: the importing master answers TRYAGAIN to a script whose
	// keys it has only some of) is sent where the source asks. (Its
	// release, with its queue's key, waits for the end of the migration.)
	other, err := c.TryAcquire(ctx, key+":other", time.Minute, padlock.WithoutFencing())
	assert.NoError(t, err, "an acquire follows ASK")
	time.Sleep(2 * ttl) // renewals meet ASK: only those that follow it keep the lease
	require.NoError(t, kctx.Err(), "the lease survived the migration: %v", context.Cause(kctx))
	for _, n := range nodes {
		require.NoError(t, n.Client().Do(ctx, "CLUSTER", "SETSLOT", m.slot, "NODE", m.toID).Err())
	}
	time.Sleep(2 * ttl) // and MOVED after it
	require.NoError(t, kctx.Err(), "the lease survived the end of the migration: %v", context.Cause(kctx))
	require.NoError(t, l.Extend(ctx, time.Minute)) // and held on until its Release
	require.NoError(t, l.Release(ctx))
	if other != nil {
		require.NoError(t, other.Release(ctx))
	}
	return m.to
}
