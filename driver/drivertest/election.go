package drivertest

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/driver"
)

// election: one leader at a time, in the order the candidates came, terms
// that go up, and Leader and Observe (on pub/sub) that follow it.
func election(t *testing.T, p *part) {
	ctx := bounded(t)
	cs := p.clients(t, 3)
	k := key(t)
	octx, stop := context.WithCancel(ctx)
	defer stop()
	seen := cs[2].Observe(octx, k)
	expectLeader(t, seen, "", 0, "before any campaign")
	a, err := cs[0].Campaign(ctx, k, 5*time.Second, "a")
	must(t, err, "Campaign")
	expectLeader(t, seen, "a", a.Term(), "the first leader")
	if li, err := cs[2].Leader(ctx, k); err != nil || li.Value != "a" || li.Term != a.Term() {
		t.Errorf("Leader: %+v, %v; want a, term %d", li, err, a.Term())
	}
	type campaign struct {
		ld  *padlock.Leadership
		err error
	}
	next := make(chan campaign, 1)
	go func() {
		ld, err := cs[1].Campaign(ctx, k, 5*time.Second, "b")
		next <- campaign{ld, err}
	}()
	waitQueued(t, cs[2], k, 1)
	must(t, a.Proclaim(ctx, "a2"), "Proclaim")
	expectLeader(t, seen, "a2", a.Term(), "a value proclaimed")
	must(t, a.Resign(ctx), "Resign")
	wantErr(t, context.Cause(a.Context()), padlock.ErrNotHeld, "a resigned leadership's context")
	var b campaign
	select {
	case b = <-next:
		must(t, b.err, "the second candidate's Campaign")
	case <-time.After(20 * time.Second):
		t.Fatal("the second candidate does not lead 20s after the first resigned")
	}
	if b.ld.Term() <= a.Term() {
		t.Errorf("the second leader's term: %d, want above the first's, %d", b.ld.Term(), a.Term())
	}
	expectLeader(t, seen, "b", b.ld.Term(), "the second leader")
	must(t, b.ld.Resign(ctx), "Resign")
	_, err = cs[2].Leader(ctx, k)
	wantErr(t, err, padlock.ErrNoLeader, "Leader once every leader resigned")
	expectLeader(t, seen, "", 0, "after the last resigned")
}

// expectLeader reads what Observe reports until it reports value and
// term, and fails t if that does not come within 5s. (A slow reader may
// miss the states between.)
func expectLeader(t testing.TB, seen <-chan padlock.LeaderInfo, value string, term int64, what string) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	var last padlock.LeaderInfo
	for {
		select {
		case li, ok := <-seen:
			if !ok {
				t.Fatalf("%s: Observe's channel closed", what)
			}
			if li.Value == value && li.Term == term {
				return
			}
			last = li
		case <-timeout:
			t.Fatalf("%s: Observe reports %+v after 5s, want value %q, term %d", what, last, value, term)
		}
	}
}

// checkDeployment: Check reads every primary through the driver (its
// Nodes), and runs its lock cycle, with no danger found on a server as
// the suite starts it.
func checkDeployment(t *testing.T, p *part) {
	ctx := bounded(t)
	c := p.client(t)
	r, err := c.Check(ctx, key(t))
	must(t, err, "Check")
	for _, f := range r.Findings {
		t.Logf("%s [%s] %s: %s", f.Severity, f.Topic, f.Node, f.Problem)
	}
	if r.HasDanger() {
		t.Errorf("Check found a danger (above)")
	}
	var steps []string
	for _, s := range r.Cycle {
		steps = append(steps, s.Name)
		if s.Err != nil {
			t.Errorf("Check's step %s: %v", s.Name, s.Err)
		}
	}
	if !slices.Contains(steps, "wait") || !slices.Contains(steps, "release") {
		t.Errorf("Check's cycle: %v, want a wait and a release among them", steps)
	}
	var addrs []string
	for _, n := range r.Nodes {
		addrs = append(addrs, n.Addr)
		if n.Err != nil {
			t.Errorf("Check's node %s: %v", n.Addr, n.Err)
		}
	}
	want := []string{p.nodes[0].Addr()}
	if p.dep.Kind == driver.Cluster || p.deps != nil {
		want = nil
		for _, n := range p.nodes {
			want = append(want, n.Addr())
		}
	}
	slices.Sort(addrs)
	slices.Sort(want)
	if !slices.Equal(addrs, want) {
		t.Errorf("Check's nodes: %s, want the primaries, %s", strings.Join(addrs, " "), strings.Join(want, " "))
	}
	if p.dep.Kind == driver.Sentinel && len(r.Nodes) == 1 && r.Nodes[0].Replicas != 1 {
		t.Errorf("Check's primary has %d replicas, want 1", r.Nodes[0].Replicas)
	}
}
