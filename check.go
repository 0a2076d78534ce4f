package padlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/padlock-go/padlock/driver"
)

// A Severity ranks a Finding of Check.
type Severity int

// The severities, least severe first.
const (
	// Info is a fact worth knowing; nothing to fix.
	Info Severity = iota
	// Warning is a setting that makes locks weaker than they could be.
	Warning
	// Danger is a setting or a failure under which a lock or a fence can
	// be lost silently, or under which locks do not work at all.
	Danger
)

// String returns "info", "warning" or "danger".
func (s Severity) String() string {
	switch s {
	case Info:
		return "info"
	case Warning:
		return "warning"
	case Danger:
		return "danger"
	}
	return "severity(" + strconv.Itoa(int(s)) + ")"
}

// MarshalText encodes s as its String, for JSON.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// A Report is what Check found out about a deployment.
type Report struct {
	Key      string     // the key the cycle ran on
	Nodes    []NodeInfo // every node the Client's locks live on
	Cycle    []Step     // the lock cycle's steps, in order (empty if it could not start)
	Findings []Finding  // most severe first
}

// HasDanger reports whether any finding is a Danger.
func (r Report) HasDanger() bool {
	return slices.ContainsFunc(r.Findings, func(f Finding) bool { return f.Severity == Danger })
}

// NodeInfo is what Check read of one node: a standalone server, a master of
// a Cluster, or a Redlock node. A fact in NotChecked was not readable (INFO
// or CONFIG refused to the Client's user, as on many managed services) and
// holds its zero value.
type NodeInfo struct {
	Addr            string   // host:port
	Server          string   // "redis", "valkey", or "miniredis" (a test server in the process)
	Version         string   // the server's own version ("8.0.1" for Valkey 8.0.1)
	Role            string   // "master" or "replica"
	Primary         string   // a replica's primary, host:port (INFO's master_host and master_port)
	Replicas        int      // replicas connected to it
	Cluster         bool     // cluster mode is on
	ShardedPubSub   bool     // SPUBLISH and SSUBSCRIBE exist (Redis 7.0+, Valkey)
	AOF             bool     // appendonly yes
	AppendFsync     string   // "always", "everysec" or "no"
	MaxMemory       int64    // bytes; 0 for no limit
	MaxMemoryPolicy string   // "noeviction", "volatile-lru", ...
	UsedMemory      int64    // bytes in use (INFO's used_memory)
	NotChecked      []string // facts not read: "server", "replication", "persistence", "memory", "cluster", "appendfsync"
	Err             error    // why the node could not be reached, or nil
}

// A Step is one step of Check's lock cycle.
type Step struct {
	Name string        // "acquire", "extend", "ttl", "wait", "fence", "release", "inspect"
	Took time.Duration // how long it took
	Err  error         // nil if it worked
}

// A Finding is one thing Check found that matters for locks.
type Finding struct {
	Severity Severity
	Node     string // the node's address, or "" for the deployment as a whole
	Topic    string // "eviction", "memory", "persistence", "replication", "acl", "cycle", "server", "settings", "key" or "waiting"
	Problem  string // what can go wrong, in one sentence
	Fix      string // what to set to fix it ("" when there is nothing to fix)
}

// checkTTL is the ttl of the locks of Check's cycle, and checkWait how long
// its waiter may wait for the release.
const (
	checkTTL  = 10 * time.Second
	checkWait = 5 * time.Second
)

// Check is a preflight of the deployment the Client talks to: it reads each
// node's server, version, role, replicas, persistence and memory settings
// (every master of a Cluster, every node of a Redlock), checks that the
// Client's Redis user may run every command padlock uses, and runs a full
// lock cycle on key as that user: acquire (fenced, except on a Redlock),
// extend, ttl, a waiter in a second Client queued and handed the lock by the
// release, its fence, release and inspect. It blocks until done, a few
// round trips and one hand-off.
//
// It writes nothing but key and its side keys, and deletes them before it
// returns, also when the cycle failed; a key that is in use (held, waited
// for, or with a fence counter) is not touched, and the cycle is skipped
// with a finding. Use a key of its own, like "lock:padlock-doctor".
//
// Settings the user may not read are listed as not checked, never an
// error. Check returns an error only for bad input (ErrInvalid), on a
// closed Client (ErrClosed, with no round trip: its cycle takes a lock), when no
// node can be reached or a Cluster's masters cannot be listed, or when ctx
// ends (wrapped); the Report then holds what was found.
func (c *Client) Check(ctx context.Context, key string) (Report, error) {
	r := Report{Key: key}
	if _, err := c.check(ctx, key, time.Millisecond); err != nil {
		return r, err
	}
	if err := c.open("check", key); err != nil {
		return r, err // its cycle takes a lock
	}
	if !queueable(key) {
		return r, fmt.Errorf("%w: Check needs a key with a hash tag or without braces, got %q", ErrInvalid, key)
	}
	nodes, err := c.checkNodes(ctx)
	if err != nil {
		return r, fmt.Errorf("padlock: check: %w", err)
	}
	var reached int
	r.Nodes, reached = readNodes(ctx, nodes)
	if err := ctx.Err(); err != nil {
		return r, fmt.Errorf("padlock: check: %w", err)
	}
	if reached == 0 {
		return r, fmt.Errorf("padlock: check: no node can be reached: %w", r.Nodes[0].Err)
	}
	for _, n := range r.Nodes {
		r.Findings = append(r.Findings, c.nodeFindings(n)...)
	}
	if c.nodes != nil && reached < c.quorum() {
		r.Findings = append(r.Findings, Finding{Severity: Danger, Topic: "server",
			Problem: fmt.Sprintf("only %d of %d Redlock nodes answer, fewer than the quorum of %d: no lock can be taken", reached, len(r.Nodes), c.quorum()),
			Fix:     "bring the unreachable nodes back"})
	}
	// The nodes that answered: the probes and the cycle's inspections run
	// on them (on a Cluster, the client routes them to the key's master).
	var live []driver.Driver
	var names []string
	if c.nodes != nil {
		for i, n := range nodes {
			if r.Nodes[i].Err == nil {
				live, names = append(live, n.Driver), append(names, r.Nodes[i].Addr)
			}
		}
	} else {
		live, names = []driver.Driver{c.d}, []string{""}
	}
	acl := c.checkCommands(ctx, key, live, names)
	r.Findings = append(r.Findings, acl...)
	if f, ok := c.checkTracking(ctx, key, r.Nodes); ok {
		r.Findings = append(r.Findings, f)
	}
	switch {
	case slices.ContainsFunc(acl, func(f Finding) bool { return strings.Contains(f.Fix, "+del ") }):
		r.Findings = append(r.Findings, Finding{Severity: Info, Topic: "cycle",
			Problem: "the lock cycle did not run: without DEL it could not delete what it writes", Fix: "add +del"})
	case ctx.Err() == nil:
		r.Cycle, r.Findings = c.checkCycle(ctx, key, live, r.Findings)
		if slices.ContainsFunc(r.Cycle, func(s Step) bool { return errors.Is(s.Err, ErrOutOfMemory) }) {
			r.Findings = refusedForMemory(r.Findings, r.Nodes)
		}
	}
	if err := ctx.Err(); err != nil {
		return r, fmt.Errorf("padlock: check: %w", err)
	}
	for i := range r.Findings {
		// A sentence each, without its period (an error's text may end
		// with one): a reader adds it.
		f := &r.Findings[i]
		f.Problem, f.Fix = strings.TrimRight(f.Problem, ". "), strings.TrimRight(f.Fix, ". ")
	}
	slices.SortStableFunc(r.Findings, func(a, b Finding) int { return int(b.Severity) - int(a.Severity) })
	return r, nil
}

// readNodes reads what Check reports of each node, all at once, and
// counts the nodes that answered.
func readNodes(ctx context.Context, nodes []driver.Node) ([]NodeInfo, int) {
	infos := make([]NodeInfo, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { infos[i] = readNode(ctx, n) })
	}
	wg.Wait()
	reached := 0
	for _, n := range infos {
		if n.Err == nil {
			reached++
		}
	}
	return infos, reached
}

// aclCommands are the commands padlock sends, directly or from its
// scripts: the README's minimal ACL rule admits exactly these (a test
// holds the two together). Each is probed by Check.
var aclCommands = []string{
	"evalsha", "eval", "script|load", "get", "mget", "set", "del", "exists", "type", "pexpire", "pttl", "incr", "time",
	"zadd", "zrem", "zrange", "zrangebyscore", "zremrangebyscore", "zscore", "zcard", "zcount",
	"hset", "hget", "hdel", "publish", "spublish", "subscribe", "unsubscribe", "ssubscribe", "sunsubscribe", "ping", "hello", "scan",
}

// A probe is the harmless call Check makes to see whether the user may
// run a command.
type probe struct {
	cmd  string // as in aclCommands
	args []any
}

// probes are the calls Check makes, in order, on keys p, z (a sorted set)
// and h (a hash) of its own, each expiring within checkTTL, and deleted by
// the last. Subscriptions are probed on a connection of their own (see
// probeSubscribe), and hello with the connection's own protocol.
// returnOneSHA is the digest of "return 1", as SCRIPT LOAD answers (padlock
// computes no SHA-1: Go's FIPS 140-only mode refuses it).
const returnOneSHA = "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"

func probes(p, z, h string, proto int) []probe {
	one := "return 1"
	ttl := checkTTL.Milliseconds()
	return []probe{
		{"hello", []any{"hello", proto}},
		{"script|load", []any{"script", "load", one}}, {"evalsha", []any{"evalsha", returnOneSHA, 0}},
		{"eval", []any{"eval", one, 0}}, {"time", []any{"time"}}, {"ping", []any{"ping"}},
		{"set", []any{"set", p, "1", "px", ttl}}, {"get", []any{"get", p}}, {"mget", []any{"mget", p}}, {"exists", []any{"exists", p}},
		{"type", []any{"type", p}}, {"incr", []any{"incr", p}}, {"pexpire", []any{"pexpire", p, ttl}}, {"pttl", []any{"pttl", p}},
		{"zadd", []any{"zadd", z, 1, "m"}}, {"pexpire", []any{"pexpire", z, ttl}}, {"zscore", []any{"zscore", z, "m"}},
		{"zcard", []any{"zcard", z}}, {"zcount", []any{"zcount", z, "-inf", "+inf"}}, {"zrange", []any{"zrange", z, 0, -1}},
		{"zrangebyscore", []any{"zrangebyscore", z, "-inf", "+inf"}},
		{"zremrangebyscore", []any{"zremrangebyscore", z, 5, 5}}, {"zrem", []any{"zrem", z, "m"}},
		{"hset", []any{"hset", h, "f", "v"}}, {"pexpire", []any{"pexpire", h, ttl}}, {"hget", []any{"hget", h, "f"}}, {"hdel", []any{"hdel", h, "f"}},
		{"publish", []any{"publish", p, "padlock-check"}}, {"spublish", []any{"spublish", p, "padlock-check"}},
		{"scan", []any{"scan", 0, "match", p, "count", 1}},
		{"del", []any{"del", p, z, h}},
	}
}

// refusal says what a NOPERM message refuses: access to the lock's keys,
// to its channels, or the command itself ("").
func refusal(msg string) string {
	m := strings.ToLower(msg)
	switch {
	case strings.Contains(m, "channel"):
		return "channel"
	case strings.Contains(m, "access a key") || strings.Contains(m, "of the keys"):
		return "key"
	}
	return ""
}

// checkCommands probes every command padlock uses, as the Client's user,
// and returns a Danger finding for each refused one
// on each of targets, named in findings by names.
func (c *Client) checkCommands(ctx context.Context, key string, targets []driver.Driver, names []string) []Finding {
	p, z, h := sideKey(key, "check"), sideKey(key, "check-z"), sideKey(key, "check-h")
	var fs []Finding
	for i, r := range targets {
		if f, ok := setupRefused(ctx, r, names[i]); ok {
			fs = append(fs, f) // no command works: nothing else to name
			continue
		}
		refused := map[string]string{}
		proto := 3
		if pr, ok := r.(driver.Protocoler); ok {
			proto = pr.Protocol()
		}
		ps := probes(p, z, h, proto)
		cmds := make([]driver.Cmd, len(ps))
		for j, pr := range ps {
			cmds[j] = driver.Cmd{Key: p, Args: pr.args} // p's, z's and h's slot is key's
		}
		r.Batch(ctx, cmds)
		for j, cmd := range cmds {
			if err := cmd.Err; err != nil && isPermissionError(err.Error()) {
				refused[ps[j].cmd] = err.Error()
			}
		}
		for _, sharded := range []bool{true, false} {
			for name, err := range probeSubscribe(ctx, r, sharded, p) {
				if isPermissionError(err.Error()) {
					refused[name] = err.Error()
				}
			}
		}
		cleanupCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		_, _ = r.Do(cleanupCtx, p, "del", p, z, h)
		cancel()
		said := map[string]bool{}
		for _, name := range aclCommands { // in the rule's order
			msg, ok := refused[name]
			if !ok {
				continue
			}
			f := Finding{Severity: Danger, Node: names[i], Topic: "acl"}
			what := refusal(msg)
			switch {
			case said[what]:
				continue
			case what == "key":
				f.Problem = fmt.Sprintf("the Redis user may not use the key %q and the keys beginning with it (%s): its locks cannot be taken", key, msg)
				f.Fix = fmt.Sprintf("admit the keys: ~%s* (or a pattern that covers it, like the README's ~lock:*)", key)
			case what == "channel":
				f.Problem = fmt.Sprintf("the Redis user may not use the channels named like %q (%s): its waiters are not woken by releases", key, msg)
				f.Fix = fmt.Sprintf("admit the channels: &%s* (or a pattern that covers them, like the README's &lock:*)", key)
			case name == "scan":
				f.Severity = Warning // the locks work; only listing them fails
				f.Problem = fmt.Sprintf("the Redis user may not run SCAN (%s): Client.Locks, padlock list, top and serve cannot list the locks", msg)
				f.Fix = "add +scan to the user's rule (the README's minimal ACL rule has it)"
			case name == "hello":
				f.Severity = Warning // go-redis falls back to AUTH
				f.Problem = fmt.Sprintf("the Redis user may not run HELLO (%s): each new connection costs a refused command and a fallback to AUTH", msg)
				f.Fix = "add +hello to the user's rule (the README's minimal ACL rule has it)"
			default:
				f.Problem = fmt.Sprintf("the Redis user may not run %s (%s): the locks that need it fail, or their waiters are not woken", strings.ToUpper(name), msg)
				f.Fix = fmt.Sprintf("add +%s to the user's rule (the README's minimal ACL rule has it)", name)
			}
			if what != "" {
				said[what] = true
			}
			fs = append(fs, f)
		}
	}
	return fs
}

// setupRefused reports a Danger finding if the user may not set up a
// connection at all: a command that go-redis sends first (SELECT of the
// URL's database, CLIENT SETNAME) is refused, so every command fails with
// its NOPERM, which would otherwise be blamed on the probes.
func setupRefused(ctx context.Context, r driver.Driver, node string) (Finding, bool) {
	_, err := r.Do(ctx, "", "ping")
	if err == nil || !isPermissionError(err.Error()) {
		return Finding{}, false
	}
	name := quotedCommand(err.Error())
	if name == "" || name == "ping" {
		return Finding{}, false // PING itself: the probes name it
	}
	return Finding{Severity: Danger, Node: node, Topic: "acl",
		Problem: fmt.Sprintf("the Redis user may not run %s, which the Redis client sends when it sets up a connection (%s): no command works", strings.ToUpper(name), err),
		Fix:     fmt.Sprintf("add +%s to the user's rule (a database other than 0 needs +select)", name)}, true
}

// quotedCommand is the command a NOPERM message names in quotes ("... run
// the 'select' command"), or "".
func quotedCommand(msg string) string {
	_, rest, ok := strings.Cut(msg, "'")
	if !ok {
		return ""
	}
	name, _, ok := strings.Cut(rest, "'")
	if !ok {
		return ""
	}
	return strings.ToLower(name)
}

// probeSubscribe subscribes to channel on a connection of its own, sharded
// (SSUBSCRIBE) or not, and unsubscribes, and returns the errors by
// command. A server that does not know the commands is not an error.
// It returns by ctx's deadline, whatever Redis does.
func probeSubscribe(ctx context.Context, r driver.Driver, sharded bool, channel string) map[string]error {
	ctx, cancel := context.WithTimeout(ctx, subscribeTimeout)
	defer cancel()
	wait := until(ctx)
	errs, err := within(ctx, func(ctx context.Context) (map[string]error, error) {
		return probeSubscribeOn(ctx, wait, r, sharded, channel), nil
	}, nil)
	if err != nil {
		return map[string]error{"subscribe": err}
	}
	return errs
}

// probeSubscribeOn is probeSubscribe, its Receives waiting up to wait.
func probeSubscribeOn(ctx context.Context, wait time.Duration, r driver.Driver, sharded bool, channel string) map[string]error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	sub, unsub := "subscribe", "unsubscribe"
	if sharded {
		sub, unsub = "ssubscribe", "sunsubscribe"
	}
	ps, err := r.PubSub(ctx, channel)
	if err != nil {
		return map[string]error{sub: err}
	}
	defer ps.Close()
	if err = ps.Subscribe(ctx, sharded, channel); err == nil {
		_, err = ps.Receive(ctx, wait)
	}
	if err != nil {
		if isUnknownCommand(err) {
			return nil
		}
		return map[string]error{sub: err}
	}
	if u, ok := ps.(driver.Unsubscriber); ok {
		if err := u.Unsubscribe(ctx, sharded, channel); err != nil {
			return map[string]error{unsub: err}
		}
	}
	return nil
}

// checkTracking opens a tracking connection to key's node, as the watch
// of waiters does (see watch.go), and returns a finding when the Client's
// waiters would learn only by polling that something else freed a key.
// nodes are Check's, the first one's Server said.
func (c *Client) checkTracking(ctx context.Context, key string, nodes []NodeInfo) (Finding, bool) {
	if c.nodes != nil || nodes[0].Server == "miniredis" {
		return Finding{}, false // a Redlock does not watch; a test server's settings are not checked
	}
	const problem = "a waiter learns that something other than padlock freed its key (an operator's DEL, an eviction, FLUSHALL) within 100ms, by its Client reading the keys it waits for, not at once through Redis's invalidations"
	tracker := c.tracker()
	if tracker == nil {
		return Finding{Severity: Info, Topic: "waiting", Problem: problem + ": the driver has no tracking (driver.Tracker)"}, true
	}
	t, err := tracker.Track(ctx, key, func([]string) {})
	if err == nil {
		t.Close()
		return Finding{}, false
	}
	f := Finding{Severity: Info, Topic: "waiting", Problem: problem + ": " + err.Error()}
	switch {
	case driver.HasPrefix(err, "NOPERM"):
		f.Fix = "ACL SETUSER <user> +client|tracking"
	case driver.HasPrefix(err, "NOPROTO") || strings.Contains(strings.ToLower(err.Error()), "hello") || strings.Contains(err.Error(), "RESP3"):
		f.Fix = "a connection in RESP3 (HELLO 3): a server or proxy that speaks it, a client without AlwaysRESP2"
	}
	return f, true
}
