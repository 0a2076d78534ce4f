package padlockrueidis_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock/driver"
	"github.com/padlock-go/padlock/internal/redistest"
)

// startCluster starts a Cluster of three masters.
func startCluster(t *testing.T) []*redistest.Server {
	t.Helper()
	return redistest.StartClusterN(t, 3)
}

func addrsOf(nodes []*redistest.Server) []string {
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr())
	}
	return addrs
}

// owner returns the node of nodes that serves key: the one that does not
// answer MOVED.
func owner(t *testing.T, nodes []*redistest.Server, key string) *redistest.Server {
	t.Helper()
	for _, n := range nodes {
		err := n.Client().Get(context.Background(), key).Err()
		if err == nil || errors.Is(err, redis.Nil) {
			return n
		}
	}
	t.Fatalf("no node serves %q", key)
	return nil
}

// keysOnEachNode returns, for each node, a key it serves, named prefix:i.
func keysOnEachNode(t *testing.T, nodes []*redistest.Server, prefix string) map[*redistest.Server]string {
	t.Helper()
	keys := map[*redistest.Server]string{}
	for i := 0; len(keys) < len(nodes); i++ {
		key := fmt.Sprintf("%s:%d", prefix, i)
		if n := owner(t, nodes, key); keys[n] == "" {
			keys[n] = key
		}
	}
	return keys
}

// migrate moves key's slot from its master to another, to (the first
// other one of nodes if nil): its keys to to, and the slot left
// MIGRATING on the source and IMPORTING on to, which then answer ASK. With
// all, the slot is given to to on every node of all.
func migrate(t *testing.T, nodes []*redistest.Server, to *redistest.Server, key string, all []*redistest.Server) *redistest.Server {
	t.Helper()
	ctx := context.Background()
	from := owner(t, nodes, key)
	if to == nil {
		for _, n := range nodes {
			if n != from {
				to = n
				break
			}
		}
	}
	fromC, toC := from.Client(), to.Client()
	slot, err := fromC.ClusterKeySlot(ctx, key).Result()
	require.NoError(t, err)
	fromID, toID := fromC.Do(ctx, "CLUSTER", "MYID").Val().(string), toC.Do(ctx, "CLUSTER", "MYID").Val().(string)
	require.NoError(t, toC.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID).Err())
	require.NoError(t, fromC.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID).Err())
	keys, err := fromC.ClusterGetKeysInSlot(ctx, int(slot), 100).Result()
	require.NoError(t, err)
	if len(keys) > 0 {
		args := []any{"MIGRATE", "127.0.0.1", to.Port(), "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		require.NoError(t, fromC.Do(ctx, args...).Err())
	}
	for _, n := range all {
		require.NoError(t, n.Client().Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err())
	}
	return to
}

func TestClusterDoAndBatch(t *testing.T) {
	t.Parallel() // mostly waits, on servers of its own
	nodes := startCluster(t)
	d, _ := newDriver(t, rueidis.ClientOption{}, addrsOf(nodes)...)
	ctx := context.Background()
	assert.Equal(t, driver.Cluster, d.Kind())

	keys := keysOnEachNode(t, nodes, "route")
	var cmds []driver.Cmd
	for n, key := range keys {
		v, err := d.Do(ctx, key, "EVAL", "return redis.call('SET', KEYS[1], ARGV[1])", 1, key, n.Addr())
		require.NoError(t, err)
		assert.Equal(t, "OK", v)
		assert.Equal(t, n.Addr(), n.Client().Get(ctx, key).Val(), "on the node that owns it")
		cmds = append(cmds, driver.Cmd{Key: key, Args: []any{"GET", key}})
	}
	d.Batch(ctx, cmds)
	for _, c := range cmds {
		require.NoError(t, c.Err)
		assert.Equal(t, owner(t, nodes, c.Key).Addr(), c.Reply)
	}

	// A command without a key goes to a master.
	hello, err := d.Do(ctx, "", "HELLO")
	require.NoError(t, err)
	assert.Equal(t, "master", hello.(map[string]any)["role"])
}

// On a Cluster with a replica of the master of slot 0, Nodes lists the
// masters alone, and a ReplicaOnly client is refused.
func TestClusterWithAReplica(t *testing.T) {
	t.Parallel() // mostly waits, on servers of its own
	nodes := startCluster(t)
	replica := startClusterReplica(t, nodes[0]) // the master of slot 0
	for _, n := range nodes {
		eventually(t, func() bool { return slotsList(t, n, replica) })
	}
	t.Run("Nodes are the masters", func(t *testing.T) {
		d, c := newDriver(t, rueidis.ClientOption{}, addrsOf(nodes)...)
		ctx := context.Background()
		require.Contains(t, c.Nodes(), replica.Addr(), "rueidis knows the replica")
		got, err := d.Nodes(ctx)
		require.NoError(t, err)
		var addrs []string
		for _, n := range got {
			addrs = append(addrs, n.Addr)
			assert.Equal(t, driver.Single, n.Driver.Kind())
			hello, err := n.Driver.Do(ctx, "", "HELLO")
			require.NoError(t, err)
			assert.Equal(t, "master", hello.(map[string]any)["role"])
		}
		want := addrsOf(nodes)
		sort.Strings(want)
		sort.Strings(addrs)
		assert.Equal(t, want, addrs)
	})
	t.Run("ReplicaOnly is refused", func(t *testing.T) {
		d, _ := newDriver(t, rueidis.ClientOption{ReplicaOnly: true}, addrsOf(nodes)...)
		assertRefused(t, d)
	})
}

func TestClusterPinFollowsMoved(t *testing.T) {
	t.Parallel() // mostly waits, on servers of its own
	nodes := startCluster(t)
	d, _ := newDriver(t, rueidis.ClientOption{}, addrsOf(nodes)...)
	ctx := context.Background()
	key := "pin:moved"
	_, err := d.Do(ctx, key, "SET", key, "before")
	require.NoError(t, err)
	to := migrate(t, nodes, nil, key, nodes) // rueidis's slot map is now out of date

	conn, err := d.Pin(ctx, key)
	require.NoError(t, err)
	defer conn.Close()
	v, err := conn.Do(ctx, "SET", key, "pinned")
	require.NoError(t, err)
	assert.Equal(t, "OK", v)
	assert.Equal(t, "pinned", to.Client().Get(ctx, key).Val())
	v, err = conn.Do(ctx, "WAIT", 0, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(0), v)
	assertPinnedTo(t, conn, to)
}

// A master just added, which owns no slot and which no slot map lists, is
// where an ASK leads while the first slot migrates to it.
func TestClusterPinFollowsAskToANewMaster(t *testing.T) {
	t.Parallel() // mostly waits, on servers of its own
	nodes := startCluster(t)
	d, c := newDriver(t, rueidis.ClientOption{}, addrsOf(nodes)...)
	ctx := context.Background()
	added := redistest.StartClusterMaster(t, nodes...)
	eventually(t, func() bool {
		return strings.Contains(added.Client().ClusterInfo(ctx).Val(), "cluster_state:ok")
	})
	require.NotContains(t, c.Nodes(), added.Addr())
	key := "pin:ask"
	migrate(t, nodes, added, key, nil) // the slot MIGRATING, the key missing: ASK

	conn, err := d.Pin(ctx, key)
	require.NoError(t, err)
	defer conn.Close()
	v, err := conn.Do(ctx, "SET", key, "asked")
	require.NoError(t, err)
	assert.Equal(t, "OK", v)
	pipe := added.Client().Pipeline()
	pipe.Do(ctx, "ASKING")
	get := pipe.Get(ctx, key)
	_, _ = pipe.Exec(ctx)
	assert.Equal(t, "asked", get.Val(), "on the new master")
	v, err = conn.Do(ctx, "WAIT", 0, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(0), v)
	assertPinnedTo(t, conn, added)
}

// assertPinnedTo checks that conn's commands go to n: its CLIENT ID is one
// of n's clients.
func assertPinnedTo(t *testing.T, conn driver.Conn, n *redistest.Server) {
	t.Helper()
	ctx := context.Background()
	id, err := conn.Do(ctx, "CLIENT", "ID")
	require.NoError(t, err)
	list, err := n.Client().ClientList(ctx).Result()
	require.NoError(t, err)
	assert.Contains(t, list, fmt.Sprintf("id=%d ", id))
}

func TestClusterPubSub(t *testing.T) {
	t.Parallel() // mostly waits, on servers of its own
	nodes := startCluster(t)
	d, _ := newDriver(t, rueidis.ClientOption{}, addrsOf(nodes)...)
	ctx := context.Background()
	keys := keysOnEachNode(t, nodes, "ps")

	// Plain: one connection hears the channels of keys on every node.
	ps, err := d.PubSub(ctx, "")
	require.NoError(t, err)
	defer ps.Close()
	for _, key := range keys {
		require.NoError(t, ps.Subscribe(ctx, false, key+":{"+key+"}:to"))
		assert.IsType(t, &driver.Subscription{}, receive(t, ps))
	}
	for _, key := range keys {
		ch := key + ":{" + key + "}:to"
		_, err := d.Do(ctx, ch, "PUBLISH", ch, "plain")
		require.NoError(t, err)
		assert.Equal(t, &driver.Message{Channel: ch, Payload: "plain"}, receive(t, ps))
	}

	// Sharded: a connection to the key's master.
	for _, key := range keys {
		ch := key + ":{" + key + "}:to"
		sps, err := d.PubSub(ctx, key)
		require.NoError(t, err)
		require.NoError(t, sps.Subscribe(ctx, true, ch, key+":{"+key+"}:b"))
		assert.IsType(t, &driver.Subscription{}, receive(t, sps))
		assert.IsType(t, &driver.Subscription{}, receive(t, sps))
		_, err = d.Do(ctx, ch, "SPUBLISH", ch, "sharded")
		require.NoError(t, err)
		assert.Equal(t, &driver.Message{Channel: ch, Payload: "sharded"}, receive(t, sps))
		require.NoError(t, sps.Close())
	}
}

// eventually waits up to 10s for cond.
func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 10*time.Second, 20*time.Millisecond)
}

// slotsList reports whether CLUSTER SLOTS on n lists node.
func slotsList(t *testing.T, n, node *redistest.Server) bool {
	slots, err := n.Client().Do(context.Background(), "CLUSTER", "SLOTS").Slice()
	require.NoError(t, err)
	for _, s := range slots {
		for _, nd := range s.([]any)[2:] {
			if nd.([]any)[1] == int64(node.Port()) {
				return true
			}
		}
	}
	return false
}
