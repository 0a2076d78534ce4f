package redistest

// Deployments of several servers: a Cluster, a Sentinel, replicas; and a
// server filled to its maxmemory.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartCluster starts a one-node Redis Cluster: a server in cluster mode
// that owns all 16384 slots. It checks slots as a bigger cluster does (a
// script's keys must share one slot), and go-redis's ClusterClient talks to
// it as to any cluster.
func StartCluster(t T) *Server {
	t.Helper()
	s := Start(t, WithArgs("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"))
	rdb := s.Client()
	ctx := context.Background()
	if err := rdb.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatalf("redistest: CLUSTER ADDSLOTSRANGE: %v", err)
	}
	deadline := time.Now().Add(startTimeout)
	for {
		info, err := rdb.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: cluster not ok after %v: %v %s", startTimeout, err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// StartSentinel starts a Redis Sentinel that monitors primary under the
// name master, with a quorum of 1, for go-redis's failover clients. It
// takes a primary for down after a second of silence, as a test wants.
// opts configure the Sentinel's server (WithBinary: the same binary as
// the primary's, in Sentinel mode).
func StartSentinel(t T, primary *Server, master string, opts ...Option) *Server {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	line := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1\n", master, primary.Port()) +
		fmt.Sprintf("sentinel down-after-milliseconds %s 1000\nsentinel failover-timeout %s 5000\n", master, master)
	if err := os.WriteFile(conf, []byte(line), 0o600); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return Start(t, withOpts(opts, func(c *config) {
		c.conf = conf
		c.args = append(c.args, "--sentinel")
	})...)
}

// StartReplica starts a replica of primary, configured by opts (as
// WithBinary), and waits until it is in sync.
func StartReplica(t T, primary *Server, opts ...Option) *Server {
	t.Helper()
	s := Start(t, withOpts(opts, WithArgs("--replicaof", "127.0.0.1", strconv.Itoa(primary.Port())))...)
	rdb := s.Client()
	deadline := time.Now().Add(startTimeout)
	for {
		info, err := rdb.Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: replica not in sync after %v: %v %s", startTimeout, err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// StartClusterN starts a Redis Cluster of n masters (no replicas), each
// configured by opts (as WithBinary), created with redis-cli --cluster
// create, and waits until every node reports the cluster ok.
func StartClusterN(t T, n int, opts ...Option) []*Server {
	t.Helper()
	nodes := make([]*Server, n)
	args := []string{"--cluster", "create"}
	for i := range nodes {
		nodes[i] = Start(t, withOpts(opts, WithArgs("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000"))...)
		args = append(args, nodes[i].Addr())
	}
	args = append(args, "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(startTimeout)
	for _, s := range nodes {
		rdb := s.Client()
		for {
			info, err := rdb.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(n)) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: cluster not ok after %v: %v %s", startTimeout, err, info)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nodes
}

// StartClusterMaster starts a cluster node that joins the cluster of
// nodes (CLUSTER MEET) as a master that owns no slot, as a cluster that
// grows adds one before slots migrate to it, and waits until it and each
// of nodes know every node of the cluster. No slot map (CLUSTER SLOTS)
// lists it until it owns a slot.
func StartClusterMaster(t T, nodes ...*Server) *Server {
	t.Helper()
	s := Start(t, WithArgs("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "2000"))
	ctx := context.Background()
	all := append([]*Server{s}, nodes...)
	clients := make([]*redis.Client, len(all))
	for i, n := range all {
		clients[i] = n.Client()
	}
	known := func(rdb *redis.Client) int {
		info, _ := rdb.ClusterInfo(ctx).Result()
		_, n, _ := strings.Cut(info, "cluster_known_nodes:")
		count, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(n, "\n", 2)[0]))
		return count
	}
	want := known(clients[1]) + 1
	if err := clients[0].ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(nodes[0].Port())).Err(); err != nil {
		t.Fatalf("redistest: CLUSTER MEET: %v", err)
	}
	deadline := time.Now().Add(startTimeout)
	for i, rdb := range clients {
		for known(rdb) != want {
			if time.Now().After(deadline) {
				t.Fatalf("redistest: %s knows %d nodes after %v, not %d", all[i].Addr(), known(rdb), startTimeout, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return s
}

// StartClusterReplica starts a cluster node, configured by opts (as
// WithBinary), that joins the cluster of primary as its replica, and waits
// until it is in sync.
func StartClusterReplica(t T, primary *Server, opts ...Option) *Server {
	t.Helper()
	s := Start(t, withOpts(opts, WithArgs("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "2000"))...)
	ctx := context.Background()
	prdb, rdb := primary.Client(), s.Client()
	id, err := prdb.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatalf("redistest: CLUSTER MYID: %v", err)
	}
	if err := rdb.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(primary.Port())).Err(); err != nil {
		t.Fatalf("redistest: CLUSTER MEET: %v", err)
	}
	deadline := time.Now().Add(startTimeout)
	replicating := false
	for {
		// REPLICATE needs the primary known first: retried until it is.
		var err error
		if !replicating {
			err = rdb.Do(ctx, "CLUSTER", "REPLICATE", id).Err()
			replicating = err == nil
		}
		info, _ := rdb.Info(ctx, "replication").Result()
		if replicating && strings.Contains(info, "master_link_status:up") {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: cluster replica not in sync after %v: %v %s", startTimeout, err, info)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// FillMemory fills the server up as a Redis at maxmemory with noeviction
// is: it sets maxmemory to 256KB above the memory in use, and
// maxmemory-policy noeviction, then writes keys "fill:N" until the server
// refuses a write of 8KB with OOM, then one of 1KB, then one of 16 bytes;
// last, it sets maxmemory 64KB below the memory in use.
func (s *Server) FillMemory(t T) {
	t.Helper()
	ctx := context.Background()
	rdb := s.Client()
	maxmemory := func(n int64) {
		for _, kv := range [][2]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", strconv.FormatInt(n, 10)}} {
			if err := rdb.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
				t.Fatalf("redistest: CONFIG SET %s: %v", kv[0], err)
			}
		}
	}
	maxmemory(usedMemory(t, rdb) + 256<<10)
	n := 0
	for _, size := range []int{8 << 10, 1 << 10, 16} {
		for pad := strings.Repeat("x", size); ; n++ {
			err := rdb.Set(ctx, "fill:"+strconv.Itoa(n), pad, 0).Err()
			if err != nil && strings.HasPrefix(err.Error(), "OOM ") {
				break
			}
			if err != nil || n > 100000 {
				t.Fatalf("redistest: filling memory, write %d of %d bytes: %v", n, size, err)
			}
		}
	}
	// Full to the byte, the server may free a buffer a moment later (Valkey
	// 8 once took a small write after this): the limit goes below what it
	// uses, so that it refuses every write until the test ends.
	maxmemory(usedMemory(t, rdb) - 64<<10)
}

// usedMemory is the server's used_memory (INFO memory).
func usedMemory(t T, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatalf("redistest: INFO memory: %v", err)
	}
	_, rest, _ := strings.Cut(info, "used_memory:")
	var used int64
	if _, err := fmt.Sscan(rest, &used); err != nil {
		t.Fatalf("redistest: used_memory in %q: %v", info, err)
	}
	return used
}
