package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/padlock-go/padlock"
)

// exitDanger is doctor's status when a finding is a Danger.
const exitDanger = 1

// doctorJSON is the -json output of 'padlock doctor': the Report.
type doctorJSON struct {
	Key      string        `json:"key"`
	Safe     bool          `json:"safe"` // no finding is a danger
	Nodes    []nodeJSON    `json:"nodes"`
	Cycle    []stepJSON    `json:"cycle"`
	Findings []findingJSON `json:"findings"`
}

type nodeJSON struct {
	Addr            string   `json:"addr"`
	Server          string   `json:"server,omitempty"`
	Version         string   `json:"version,omitempty"`
	Role            string   `json:"role,omitempty"`
	Primary         string   `json:"primary,omitempty"`
	Replicas        int      `json:"replicas"`
	Cluster         bool     `json:"cluster"`
	ShardedPubSub   bool     `json:"sharded_pubsub"`
	AOF             bool     `json:"aof"`
	AppendFsync     string   `json:"appendfsync,omitempty"`
	MaxMemory       int64    `json:"maxmemory"`
	MaxMemoryPolicy string   `json:"maxmemory_policy,omitempty"`
	UsedMemory      int64    `json:"used_memory"`
	NotChecked      []string `json:"not_checked,omitempty"`
	Error           string   `json:"error,omitempty"`
}

type stepJSON struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	TookMs int64  `json:"took_ms"`
	Error  string `json:"error,omitempty"`
}

type findingJSON struct {
	Severity padlock.Severity `json:"severity"`
	Node     string           `json:"node,omitempty"`
	Topic    string           `json:"topic"`
	Problem  string           `json:"problem"`
	Fix      string           `json:"fix,omitempty"`
}

// doctorCmd is 'padlock doctor'. It exits 0 when nothing is a danger, 1
// when something is, 69 when Redis cannot be reached, 64 on usage errors.
func doctorCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	v := newVerb("doctor", "padlock doctor [-redis URL] [-timeout D] [-key KEY] [-json]",
		"Checks whether the Redis at URL is safe for locks: its version, role and replicas,\n"+
			"persistence and eviction settings, whether the user may run every command padlock\n"+
			"needs, and a full lock cycle on KEY (deleted afterwards). Prints one line per\n"+
			"finding, most severe first. -timeout bounds each request, not the whole check.",
		"  0      nothing is a danger\n  1      something is a danger\n"+exitUsageHelp+exitRedisHelp, stdout, stderr)
	rf := addRedisFlags(v.fset)
	key := v.fset.String("key", "lock:padlock-doctor", "the key of the lock cycle: one nobody else uses")
	asJSON := v.fset.Bool("json", false, "print the report as one JSON object")
	if code, ok := v.parseFlags(args, " (-key KEY names its key)"); !ok {
		return code
	}
	c, locks, done, code := v.connect(rf)
	if locks == nil {
		return code
	}
	defer done()

	report, err := locks.Check(ctx, *key)
	if err != nil {
		return v.fail("check whether Redis is safe for locks", c, err)
	}
	if *asJSON {
		err = json.NewEncoder(stdout).Encode(reportJSON(report))
	} else {
		err = printReport(stdout, redact(c.url), report)
	}
	if err != nil {
		fmt.Fprintf(stderr, "padlock doctor: %v\n", err)
		return 1
	}
	if report.HasDanger() {
		return exitDanger
	}
	return 0
}

func reportJSON(r padlock.Report) doctorJSON {
	out := doctorJSON{Key: r.Key, Safe: !r.HasDanger(), Nodes: []nodeJSON{}, Cycle: []stepJSON{}, Findings: []findingJSON{}}
	for _, n := range r.Nodes {
		nj := nodeJSON{Addr: n.Addr, Server: n.Server, Version: n.Version, Role: n.Role, Primary: n.Primary, Replicas: n.Replicas, Cluster: n.Cluster,
			ShardedPubSub: n.ShardedPubSub, AOF: n.AOF, AppendFsync: n.AppendFsync, MaxMemory: n.MaxMemory,
			MaxMemoryPolicy: n.MaxMemoryPolicy, UsedMemory: n.UsedMemory, NotChecked: n.NotChecked}
		if n.Err != nil {
			nj.Error = n.Err.Error()
		}
		out.Nodes = append(out.Nodes, nj)
	}
	for _, s := range r.Cycle {
		sj := stepJSON{Name: s.Name, OK: s.Err == nil, TookMs: s.Took.Milliseconds()}
		if s.Err != nil {
			sj.Error = s.Err.Error()
		}
		out.Cycle = append(out.Cycle, sj)
	}
	for _, f := range r.Findings {
		out.Findings = append(out.Findings, findingJSON(f))
	}
	return out
}

// printReport writes the report as text: the nodes, the cycle, then one
// line per finding, most severe first.
func printReport(w io.Writer, url string, r padlock.Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "padlock doctor: %s, key %s\n", url, r.Key)
	for _, n := range r.Nodes {
		if n.Err != nil {
			fmt.Fprintf(&b, "node %s: cannot be reached: %v\n", n.Addr, n.Err)
			continue
		}
		fmt.Fprintf(&b, "node %s: %s\n", n.Addr, nodeSummary(n))
	}
	var done []string
	failed := ""
	for _, s := range r.Cycle {
		if s.Err != nil {
			failed = fmt.Sprintf(", FAILED at %s: %v", s.Name, s.Err)
			break
		}
		done = append(done, s.Name)
	}
	fmt.Fprintf(&b, "lock cycle: %s%s\n", orDash(strings.Join(done, " ")), failed)
	for _, f := range r.Findings {
		node := ""
		if f.Node != "" {
			node = " " + f.Node
		}
		fix := ""
		if f.Fix != "" {
			fix = " Fix: " + f.Fix + "."
		}
		fmt.Fprintf(&b, "%-7s %s%s: %s.%s\n", strings.ToUpper(f.Severity.String()), f.Topic, node, f.Problem, fix)
	}
	if r.HasDanger() {
		b.WriteString("not safe for locks: fix the DANGER findings\n")
	} else {
		b.WriteString("no danger found\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// nodeSummary is one node's facts on one line; what was not read says so.
func nodeSummary(n padlock.NodeInfo) string {
	unread := func(fact string) bool { return slices.Contains(n.NotChecked, fact) }
	var parts []string
	if !unread("server") {
		parts = append(parts, n.Server+" "+n.Version)
	}
	if !unread("replication") {
		role := n.Role
		if n.Primary != "" {
			role += " of " + n.Primary
		}
		parts = append(parts, fmt.Sprintf("%s with %d replica(s)", role, n.Replicas))
	}
	if n.Cluster {
		parts = append(parts, "cluster")
	}
	if !unread("persistence") {
		aof := "aof off"
		if n.AOF {
			aof = "aof on"
			if !unread("appendfsync") {
				aof += ", appendfsync " + n.AppendFsync
			}
		}
		parts = append(parts, aof)
	}
	if !unread("memory") {
		if n.MaxMemory == 0 {
			parts = append(parts, "no maxmemory")
		} else {
			parts = append(parts, fmt.Sprintf("maxmemory %d bytes, %s, %d used", n.MaxMemory, n.MaxMemoryPolicy, n.UsedMemory))
		}
	}
	if len(n.NotChecked) > 0 {
		parts = append(parts, "not checked: "+strings.Join(n.NotChecked, ", "))
	}
	return strings.Join(parts, "; ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
