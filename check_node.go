package padlock

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/padlock-go/padlock/driver"
)

// What Check reads of each node, and what it finds in its settings.

// checkNodes returns every node the Client's locks live on (each node of a
// Redlock, or a Cluster's masters, or the one server), by address.
func (c *Client) checkNodes(ctx context.Context) ([]driver.Node, error) {
	var out []driver.Node
	for _, d := range c.pubsubNodes() {
		nodes, err := d.Nodes(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, nodes...)
	}
	slices.SortStableFunc(out, func(a, b driver.Node) int { return strings.Compare(a.Addr, b.Addr) })
	return out, nil
}

// isTestServer reports whether d is miniredis, an in-process test server
// (padlocktest's, the demo's), whose INFO (which answered err) has no
// server section.
func isTestServer(ctx context.Context, d driver.Driver, err error) bool {
	if err != nil {
		return false
	}
	_, err = d.Do(ctx, "", "info", "server")
	return err != nil && strings.Contains(err.Error(), "section (server) is not supported")
}

// readNode reads what Check reports of one node: INFO, and CONFIG GET
// appendfsync.
func readNode(ctx context.Context, node driver.Node) NodeInfo {
	n, d := NodeInfo{Addr: node.Addr}, node.Driver
	reply, err := d.Do(ctx, "", "info")
	if err != nil && (!isRedisError(err) || isAuthError(err)) {
		n.Err = err
		return n
	}
	text, _ := reply.(string)
	if !strings.Contains(n.Addr, ":") {
		// A failover client's Addr is "FailoverClient": ask the server
		// which address it was reached at.
		if ci, err := d.Do(ctx, "", "client", "info"); err == nil {
			for _, f := range strings.Fields(fmt.Sprint(ci)) {
				if a, ok := strings.CutPrefix(f, "laddr="); ok {
					n.Addr = a
				}
			}
		}
	}
	info := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			info[k] = v
		}
	}
	readInfo(ctx, d, err, info, &n)
	if v := configValue(d.Do(ctx, "", "config", "get", "appendfsync")); v != "" {
		n.AppendFsync = v
	} else {
		n.NotChecked = append(n.NotChecked, "appendfsync")
	}
	return n
}

// readInfo reads into n the facts of info, INFO's fields (INFO answered
// err).
func readInfo(ctx context.Context, d driver.Driver, err error, info map[string]string, n *NodeInfo) {
	// Each section's fact, read if its field is there.
	if v, ok := info["redis_version"]; ok {
		n.Server, n.Version = "redis", v
		if info["server_name"] == "valkey" {
			n.Server, n.Version = "valkey", info["valkey_version"]
		}
		var major int
		_, _ = fmt.Sscanf(v, "%d.", &major)
		n.ShardedPubSub = major >= 7 // Valkey reports the Redis version it is compatible with, 7.2 or later
	} else if isTestServer(ctx, d, err) {
		n.Server = "miniredis"
	} else {
		n.NotChecked = append(n.NotChecked, "server")
	}
	// field is info's field, if the section it is in was there; else the
	// section is not checked.
	field := func(name, section string) (string, bool) {
		v, ok := info[name]
		if !ok {
			n.NotChecked = append(n.NotChecked, section)
		}
		return v, ok
	}
	if v, ok := field("role", "replication"); ok {
		n.Role = strings.Replace(v, "slave", "replica", 1)
		n.Replicas, _ = strconv.Atoi(info["connected_slaves"])
		if h, p := info["master_host"], info["master_port"]; n.Role == "replica" && h != "" {
			n.Primary = net.JoinHostPort(h, p)
		}
	}
	if v, ok := field("aof_enabled", "persistence"); ok {
		n.AOF = v == "1"
	}
	if v, ok := field("maxmemory", "memory"); ok {
		n.MaxMemory, _ = strconv.ParseInt(v, 10, 64)
		n.MaxMemoryPolicy = info["maxmemory_policy"]
		n.UsedMemory, _ = strconv.ParseInt(info["used_memory"], 10, 64)
	}
	if v, ok := field("cluster_enabled", "cluster"); ok {
		n.Cluster = v == "1"
	}
}

// configValue is the value of the one parameter of a CONFIG GET's reply
// (an array of name and value, or a map in RESP3), or "" if it failed.
func configValue(reply any, err error) string {
	if err != nil {
		return ""
	}
	switch v := reply.(type) {
	case []any:
		if len(v) == 2 {
			s, _ := v[1].(string)
			return s
		}
	case map[string]any:
		for _, e := range v {
			s, _ := e.(string)
			return s
		}
	}
	return ""
}

// isAuthError reports whether err is Redis refusing the Client's
// credentials: nothing can be checked as that user.
func isAuthError(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "WRONGPASS") || strings.Contains(msg, "NOAUTH") || strings.Contains(msg, "invalid password")
}

// Servers and versions that padlock's CI tests; newer ones are expected to
// work.
var testedUpTo = map[string][2]int{"redis": {8, 0}, "valkey": {8, 0}}

// nodeFindings are the findings about one node's settings.
func (c *Client) nodeFindings(n NodeInfo) []Finding {
	var fs []Finding
	add := func(s Severity, topic, problem, fix string) {
		fs = append(fs, Finding{Severity: s, Node: n.Addr, Topic: topic, Problem: problem, Fix: fix})
	}
	if n.Err != nil {
		sev := Danger
		if c.nodes != nil {
			sev = Warning // a Redlock survives a minority; the quorum is checked apart
		}
		add(sev, "server", fmt.Sprintf("the node cannot be reached: %v", n.Err), "check the address, the network and that the server runs")
		return fs
	}
	if n.Server == "miniredis" {
		add(Info, "server", "a test server in this process (miniredis, as padlocktest and padlock demo run): its locks are for tests; its settings are not checked", "")
		return fs
	}
	if len(n.NotChecked) > 0 {
		add(Info, "settings", fmt.Sprintf("not checked: %s (INFO or CONFIG GET refused to this user, or unknown to the server)", strings.Join(n.NotChecked, ", ")),
			"check these settings with your provider, or run Check as a user allowed +info and +config|get")
	}
	if n.Version != "" {
		var major, minor int
		_, _ = fmt.Sscanf(n.Version, "%d.%d", &major, &minor)
		switch up := testedUpTo[n.Server]; {
		case n.Server == "redis" && major < 6:
			add(Danger, "server", fmt.Sprintf("Redis %s is too old: every padlock call fails with ErrUnsupported", n.Version), "upgrade to Redis 6.0 or later, or Valkey 7.2 or later")
		case major > up[0] || major == up[0] && minor > up[1]:
			add(Info, "server", fmt.Sprintf("%s %s is newer than the releases padlock's CI tests (up to %d.%d); it is expected to work", n.Server, n.Version, up[0], up[1]), "")
		}
	}
	switch {
	case n.MaxMemory > 0 && strings.HasPrefix(n.MaxMemoryPolicy, "allkeys-"):
		add(Danger, "eviction", fmt.Sprintf("maxmemory-policy %s evicts any key under memory pressure: a held lock (a second holder gets it) and a fence counter (fences start again at 1)", n.MaxMemoryPolicy),
			"CONFIG SET maxmemory-policy noeviction, or keep locks on a Redis of their own without maxmemory")
	case n.MaxMemory > 0 && strings.HasPrefix(n.MaxMemoryPolicy, "volatile-"):
		add(Danger, "eviction", fmt.Sprintf("maxmemory-policy %s evicts keys with a TTL under memory pressure, and every held lock has one: a second holder can get a lock that is still held", n.MaxMemoryPolicy),
			"CONFIG SET maxmemory-policy noeviction, or keep locks on a Redis of their own without maxmemory")
	}
	fs = append(fs, memoryFindings(n)...)
	switch {
	case slices.Contains(n.NotChecked, "persistence"):
	case !n.AOF:
		add(Warning, "persistence", "appendonly is off: a restart loses every lock (a second holder can take one that is still in use) and resets every fence counter",
			"CONFIG SET appendonly yes and appendfsync always (or restart no sooner than the longest lock ttl)")
	case n.AppendFsync == "everysec" || n.AppendFsync == "no":
		add(Warning, "persistence", fmt.Sprintf("appendfsync %s: a crash can lose the locks and fences of the last second or more", n.AppendFsync),
			"CONFIG SET appendfsync always")
	}
	want := c.opts.replicas
	switch {
	case n.Role == "replica":
		primary := "the primary"
		if n.Primary != "" {
			primary += ", " + n.Primary
		}
		add(Danger, "replication", "this address is a read-only replica: every acquire, release and extend fails (a replica refuses writes with READONLY)",
			"point padlock at "+primary)
	case n.Replicas > 0 && want == 0:
		add(Warning, "replication", fmt.Sprintf("the primary has %d replica(s) and the Client does not wait for them: a failover to a replica that had not received a lock yet gives it to a second holder", n.Replicas),
			fmt.Sprintf("padlock.WithReplicas(%d, timeout) on the Client, and fencing for writes that must not overlap", n.Replicas))
	case want > n.Replicas && !slices.Contains(n.NotChecked, "replication"):
		add(Danger, "replication", fmt.Sprintf("WithReplicas(%d) waits for %d replica(s) and the primary has %d: every acquire fails with ErrNotReplicated", want, want, n.Replicas),
			fmt.Sprintf("attach replicas, or use WithReplicas(%d, timeout)", n.Replicas))
	}
	if n.Cluster && !n.ShardedPubSub && !slices.Contains(n.NotChecked, "server") {
		add(Info, "server", "a Cluster without sharded pub/sub (before Redis 7.0): every release notification goes to every node", "upgrade to Redis 7.0 or later")
	}
	return fs
}

// memoryFindings is a finding about n's memory, if it is full, or nearly,
// under a policy that refuses writes then: noeviction.
func memoryFindings(n NodeInfo) []Finding {
	if n.MaxMemory <= 0 || n.MaxMemoryPolicy != "noeviction" || n.UsedMemory < n.MaxMemory/10*9 {
		return nil
	}
	f := Finding{Severity: Warning, Node: n.Addr, Topic: "memory",
		Problem: fmt.Sprintf("Redis is nearly out of memory: used_memory %d bytes of maxmemory %d, with maxmemory-policy noeviction: once full, it refuses writes, and every acquire fails with ErrOutOfMemory",
			n.UsedMemory, n.MaxMemory),
		Fix: "raise maxmemory (CONFIG SET maxmemory) or free memory"}
	if n.UsedMemory >= n.MaxMemory/100*99 {
		f = outOfMemory(n)
	}
	return []Finding{f}
}

// outOfMemory is the finding about n once it refuses writes for want of
// memory: its used_memory read a moment before may still be a little
// under maxmemory.
func outOfMemory(n NodeInfo) Finding {
	return Finding{Severity: Danger, Node: n.Addr, Topic: "memory",
		Problem: fmt.Sprintf("Redis is out of memory: used_memory %d bytes of maxmemory %d, and maxmemory-policy %s refuses writes: every acquire fails with ErrOutOfMemory",
			n.UsedMemory, n.MaxMemory, n.MaxMemoryPolicy),
		Fix: "raise maxmemory (CONFIG SET maxmemory) or free memory"}
}

// refusedForMemory makes the memory findings of nodes dangers when the
// lock cycle was refused for want of memory: the refusal is the proof.
func refusedForMemory(fs []Finding, nodes []NodeInfo) []Finding {
	for _, n := range nodes {
		if n.Err != nil || n.MaxMemory <= 0 {
			continue
		}
		i := slices.IndexFunc(fs, func(f Finding) bool { return f.Topic == "memory" && f.Node == n.Addr })
		switch {
		case i < 0 && n.UsedMemory >= n.MaxMemory/10*9:
			fs = append(fs, outOfMemory(n))
		case i >= 0:
			fs[i] = outOfMemory(n)
		}
	}
	return fs
}
