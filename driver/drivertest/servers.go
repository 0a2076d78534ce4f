package drivertest

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock/driver"
	"github.com/padlock-go/padlock/internal/redistest"
)

// servers is how a Run starts its servers: with the binary it was given
// (see the package documentation).
type servers struct {
	bin  string             // the binary's path; "" for redis-server from PATH
	opts []redistest.Option // what starts it
}

// newServers returns how to start servers of the binary at path, or of
// ServerEnv's, or of redis-server from PATH. A binary that is not there
// skips t, or fails it when PADLOCK_REDIS is "required" or when it was
// named (a typo must not skip the suite).
func newServers(t *testing.T, path string) *servers {
	t.Helper()
	if path == "" {
		path = os.Getenv(ServerEnv)
	}
	if path == "" {
		redistest.Available(t)
		t.Log("drivertest: servers of redis-server from PATH")
		return &servers{opts: []redistest.Option{syncAtOnce}}
	}
	if fi, err := os.Stat(path); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		t.Fatalf("drivertest: the server binary %q is not an executable file (%v)", path, err)
	}
	t.Logf("drivertest: servers of %s", path)
	return &servers{bin: path, opts: []redistest.Option{redistest.WithBinary(path), syncAtOnce}}
}

// syncAtOnce has a primary send its data to a new replica at once: by
// default Redis 7 and Valkey wait 5s for more replicas to come.
var syncAtOnce = redistest.WithArgs("--repl-diskless-sync-delay", "0")

// start starts one server.
func (s *servers) start(t *testing.T) *redistest.Server {
	t.Helper()
	return redistest.Start(t, s.opts...)
}

// runSingle runs the checks on one server.
func runSingle(t *testing.T, s Setup, srv *servers) {
	one := srv.start(t)
	dep := Deployment{Kind: driver.Single, Addrs: []string{one.Addr()}}
	p := newPart(t, s, dep, redis.NewClient(&redis.Options{Addr: one.Addr()}), one)
	p.srv, p.nodes = srv, []*redistest.Server{one}
	// The bound checks first, one at a time, before the others run in
	// parallel: ShortDeadlines loads the machine, and the others time
	// round trips against short ttls. PubSubIdle, which only waits (11s,
	// on a server of its own), runs beside them.
	t.Run("Before", func(t *testing.T) {
		p.runAll(t, singleChecks)
		t.Run("Bounds", func(t *testing.T) {
			t.Parallel()
			for _, c := range boundChecks {
				t.Run(c.name, func(t *testing.T) { c.run(t, p) })
			}
		})
	})
	p.runAll(t, commonChecks)
}

// runCluster runs the checks on a Cluster of three masters, created with
// redis-cli (the Cluster is skipped, or failed if required, without it).
func runCluster(t *testing.T, s Setup, srv *servers) {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		if redistest.Required() {
			t.Fatalf("PADLOCK_REDIS=required but redis-cli, which creates the Cluster, is not on PATH: %v", err)
		}
		t.Skip("redis-cli, which creates the Cluster, is not on PATH; set PADLOCK_REDIS=required to fail instead")
	}
	nodes := redistest.StartClusterN(t, 3, srv.opts...)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr())
	}
	// Replicas of two masters, for a slot that moves from one to the
	// other under WithReplicas (see slotMoves).
	data := slices.Concat(nodes, []*redistest.Server{
		redistest.StartClusterReplica(t, nodes[0], srv.opts...),
		redistest.StartClusterReplica(t, nodes[1], srv.opts...),
	})
	dep := Deployment{Kind: driver.Cluster, Addrs: addrs}
	p := newPart(t, s, dep, redis.NewClusterClient(&redis.ClusterOptions{Addrs: slices.Clone(addrs)}), data...)
	p.srv, p.nodes = srv, nodes
	keys := keysOnEveryMaster(t, p, "drivertest:streaming")
	waitStreaming(t, p.raw[nodes[0].Addr()], keys[0], 1)
	waitStreaming(t, p.raw[nodes[1].Addr()], keys[1], 1)
	p.runAll(t, slices.Concat(commonChecks, clusterChecks))
}

// sentinelMaster is the name the Sentinel knows its primary by.
const sentinelMaster = "drivertest"

// runSentinel runs the checks on a primary with a replica, watched by a
// Sentinel, and then a failover.
func runSentinel(t *testing.T, s Setup, srv *servers) {
	primary := srv.start(t)
	replica := redistest.StartReplica(t, primary, srv.opts...)
	sentinel := redistest.StartSentinel(t, primary, sentinelMaster, srv.opts...)
	dep := Deployment{Kind: driver.Sentinel, Addrs: []string{sentinel.Addr()}, MasterName: sentinelMaster}
	admin := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: sentinelMaster, SentinelAddrs: slices.Clone(dep.Addrs)})
	p := newPart(t, s, dep, admin, primary, replica)
	p.srv, p.nodes, p.sentinel = srv, []*redistest.Server{primary, replica}, sentinel
	waitStreaming(t, p.raw[primary.Addr()], "drivertest:streaming", 1)
	// The failover changes what the other checks run on: it comes after
	// them.
	t.Run("Checks", func(t *testing.T) { p.runAll(t, slices.Concat(commonChecks, sentinelChecks)) })
	t.Run("Failover", func(t *testing.T) { sentinelFailover(t, p) })
}

// runRedlock runs the checks on a Redlock of three servers, and then with
// one of them down.
func runRedlock(t *testing.T, s Setup, srv *servers) {
	var nodes []*redistest.Server
	var deps []Deployment
	for range 3 {
		n := srv.start(t)
		nodes = append(nodes, n)
		deps = append(deps, Deployment{Kind: driver.Single, Addrs: []string{n.Addr()}})
	}
	p := newPart(t, s, deps[0], redis.NewClient(&redis.Options{Addr: nodes[0].Addr()}), nodes...)
	p.srv, p.nodes, p.deps = srv, nodes, deps
	t.Run("Checks", func(t *testing.T) { p.runAll(t, redlockChecks) })
	t.Run("MinorityDown", func(t *testing.T) { redlockMinorityDown(t, p) })
}

// waitStreaming waits until the primary of rdb streams its writes to its
// n replicas: a replica that has just synced gets them only once its
// first acknowledgement came (within a second), and a WAIT until then
// waits for it. It writes and deletes key (one the primary owns), and
// WAITs for it.
func waitStreaming(t *testing.T, rdb *redis.Client, key string, n int) {
	t.Helper()
	ctx := context.Background()
	must(t, rdb.Set(ctx, key, "1", 0).Err(), "SET %s", key)
	must(t, rdb.Del(ctx, key).Err(), "DEL %s", key)
	if acks, err := rdb.Wait(ctx, n, 10*time.Second).Result(); err != nil || acks < int64(n) {
		t.Fatalf("%s: %d of %d replicas acknowledged a write after 10s (%v)", rdb.Options().Addr, acks, n, err)
	}
}
