package padlock_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/redistest"
)

// findings returns the report's findings on topic.
func findings(r padlock.Report, topic string) []padlock.Finding {
	var out []padlock.Finding
	for _, f := range r.Findings {
		if f.Topic == topic {
			out = append(out, f)
		}
	}
	return out
}

// logReport writes the report to the test log, as padlock doctor would.
// checkWithout runs Check on "lock:doctor" of a server of its own, as a
// user with the README's rule but for the permission perm.
func checkWithout(t *testing.T, perm string) (*matrixServer, padlock.Report) {
	t.Helper()
	s := startMatrixServer(t, redistest.Servers(t)[0])
	rule := slices.DeleteFunc(s.minimalACL(t), func(r string) bool { return r == perm })
	c := padlock.New(s.user(t, "without-"+perm[1:], rule))
	defer c.Close()
	r, err := c.Check(t.Context(), "lock:doctor")
	require.NoError(t, err)
	logReport(t, r)
	return s, r
}

func logReport(t *testing.T, r padlock.Report) {
	t.Helper()
	for _, n := range r.Nodes {
		t.Logf("node %s: %s %s role=%s replicas=%d aof=%v fsync=%s maxmemory=%d/%s cluster=%v not checked=%v err=%v",
			n.Addr, n.Server, n.Version, n.Role, n.Replicas, n.AOF, n.AppendFsync, n.MaxMemory, n.MaxMemoryPolicy, n.Cluster, n.NotChecked, n.Err)
	}
	for _, s := range r.Cycle {
		t.Logf("step %s: %v (%v)", s.Name, s.Err, s.Took.Round(time.Millisecond))
	}
	for i, f := range r.Findings {
		t.Logf("%s [%s] %s: %s -- fix: %s", f.Severity, f.Topic, f.Node, f.Problem, f.Fix)
		if i > 0 {
			assert.GreaterOrEqual(t, r.Findings[i-1].Severity, f.Severity, "most severe first")
		}
	}
}

// cycleOK asserts that every step of the lock cycle ran and worked.
func cycleOK(t *testing.T, r padlock.Report, fenced bool) {
	t.Helper()
	var names []string
	for _, s := range r.Cycle {
		assert.NoError(t, s.Err, s.Name)
		names = append(names, s.Name)
	}
	want := []string{"inspect", "acquire", "extend", "ttl", "wait", "fence", "release", "inspect"}
	if !fenced {
		want = slices.DeleteFunc(want, func(s string) bool { return s == "fence" })
	}
	assert.Equal(t, want, names)
}

// noKeysLeft asserts that the server holds no key matching match ("*":
// none at all): Check deletes what it wrote.
func noKeysLeft(t *testing.T, admin *redis.Client, match string) {
	t.Helper()
	keys, err := admin.Keys(context.Background(), match).Result()
	require.NoError(t, err)
	assert.Empty(t, keys, "Check left keys behind")
}

// Each setting that makes locks unsafe is found, on every server of the
// matrix, and a deployment without them gets no finding about them; the
// cycle runs every time, and leaves nothing behind.
func TestCheckFindsUnsafeSettings(t *testing.T) {
	t.Parallel()
	for _, bin := range redistest.Servers(t) {
		t.Run(filepath.Base(bin), func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, redistest.WithBinary(bin))
			admin := srv.Client()
			c := padlock.New(srv.Client())
			defer c.Close()
			ctx := t.Context()
			tests := []struct {
				name     string
				config   []string // CONFIG SET name value ...
				topic    string   // the finding expected, "" for none on eviction and persistence
				severity padlock.Severity
				says     []string // words its Problem has
			}{
				{"volatile-lru", []string{"maxmemory", "100mb", "maxmemory-policy", "volatile-lru", "appendonly", "yes", "appendfsync", "always"},
					"eviction", padlock.Danger, []string{"volatile-lru", "held lock"}},
				{"allkeys-lru", []string{"maxmemory", "100mb", "maxmemory-policy", "allkeys-lru", "appendonly", "yes", "appendfsync", "always"},
					"eviction", padlock.Danger, []string{"allkeys-lru", "held lock", "fence counter"}},
				{"noeviction, always", []string{"maxmemory", "100mb", "maxmemory-policy", "noeviction", "appendonly", "yes", "appendfsync", "always"},
					"", 0, nil},
				{"appendonly no", []string{"maxmemory", "0", "maxmemory-policy", "noeviction", "appendonly", "no"},
					"persistence", padlock.Warning, []string{"appendonly is off", "restart"}},
				{"everysec", []string{"appendonly", "yes", "appendfsync", "everysec"},
					"persistence", padlock.Warning, []string{"everysec", "crash"}},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					for i := 0; i < len(tt.config); i += 2 {
						require.NoError(t, admin.ConfigSet(ctx, tt.config[i], tt.config[i+1]).Err(), tt.config[i])
					}
					r, err := c.Check(ctx, "lock:doctor")
					require.NoError(t, err)
					logReport(t, r)
					require.Len(t, r.Nodes, 1)
					assert.Equal(t, srv.Addr(), r.Nodes[0].Addr)
					assert.Empty(t, r.Nodes[0].NotChecked)
					assert.Equal(t, "master", r.Nodes[0].Role)
					cycleOK(t, r, true)
					noKeysLeft(t, admin, "*")
					assert.Empty(t, findings(r, "acl"))
					for _, topic := range []string{"eviction", "persistence"} {
						fs := findings(r, topic)
						if topic != tt.topic {
							assert.Empty(t, fs, topic)
							continue
						}
						require.Len(t, fs, 1, topic)
						assert.Equal(t, tt.severity, fs[0].Severity)
						assert.Equal(t, srv.Addr(), fs[0].Node)
						assert.NotEmpty(t, fs[0].Fix)
						for _, w := range tt.says {
							assert.Contains(t, fs[0].Problem, w)
						}
					}
					assert.Equal(t, tt.severity == padlock.Danger, r.HasDanger())
					if len(r.Findings) > 1 {
						assert.GreaterOrEqual(t, r.Findings[0].Severity, r.Findings[len(r.Findings)-1].Severity, "most severe first")
					}
				})
			}
		})
	}
}

// An ACL user with the README's rule less one command gets a Danger
// finding that names the command, on every server of the matrix, whether
// the command is sent directly or from a script; the full rule gets none.
func TestCheckNamesTheMissingPermission(t *testing.T) {
	t.Parallel()
	for _, bin := range redistest.Servers(t) {
		t.Run(filepath.Base(bin), func(t *testing.T) {
			t.Parallel()
			s := startMatrixServer(t, bin)
			ctx := t.Context()
			full := s.minimalACL(t)
			missing := []string{"", "+incr", "+zadd", "+pexpire", "+evalsha", "+hset", "+publish", "+hello", "+subscribe", "+unsubscribe"}
			if s.hasShardedPubSub() {
				missing = append(missing, "+spublish", "+ssubscribe", "+sunsubscribe")
			}
			if s.hasChannelACLs() {
				missing = append(missing, "&lock:*")
			}
			for i, m := range missing {
				name := strings.TrimLeft(m, "+&")
				if m == "" {
					name = "none"
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel() // a key each: some wait seconds for a release notification that never comes
					rule := slices.DeleteFunc(slices.Clone(full), func(r string) bool { return r == m })
					require.Len(t, rule, len(full)-min(len(m), 1))
					c := padlock.New(s.user(t, fmt.Sprintf("u%d", i), rule))
					defer c.Close()
					key := fmt.Sprintf("lock:doctor-%s", strings.Trim(name, ":*"))
					r, err := c.Check(ctx, key)
					require.NoError(t, err)
					logReport(t, r)
					noKeysLeft(t, s.admin, key+"*")
					acl := findings(r, "acl")
					if m == "" {
						assert.Empty(t, acl)
						cycleOK(t, r, true)
						assert.False(t, r.HasDanger())
						return
					}
					if m == "+hello" && (s.version[0] > 6 || s.version[1] >= 2) {
						assert.Empty(t, acl, "from Redis 6.2 on (and on Valkey), HELLO is not checked against ACLs")
						return
					}
					require.Len(t, acl, 1)
					if m == "+hello" {
						assert.Equal(t, padlock.Warning, acl[0].Severity, "go-redis falls back to AUTH")
						assert.Contains(t, acl[0].Problem, "HELLO")
						return
					}
					assert.Equal(t, padlock.Danger, acl[0].Severity)
					assert.True(t, r.HasDanger())
					if m[0] == '&' {
						assert.Contains(t, acl[0].Problem, "channels")
						assert.Contains(t, acl[0].Fix, "&"+key+"*")
						return
					}
					assert.Contains(t, acl[0].Problem, strings.ToUpper(name))
					assert.Contains(t, acl[0].Fix, m)
				})
			}
		})
	}
}

// A user with exactly the README's rule (and +info +config|get), on db 1
// through the URL form: go-redis's SELECT is refused on every connection,
// so nothing works, and Check names SELECT, not the probes it made; with
// +select, as the README says for a database other than 0, all is well.
func TestCheckNamesSELECTForAnotherDatabase(t *testing.T) {
	t.Parallel()
	s := startMatrixServer(t, redistest.Servers(t)[0])
	ctx := t.Context()
	for _, tt := range []struct {
		name   string
		extra  []string
		danger bool
	}{
		{"without +select", nil, true},
		{"with +select", []string{"+select"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			user := strings.ReplaceAll(tt.name, " ", "-")
			rule := append(append(s.minimalACL(t), "+info", "+config|get"), tt.extra...)
			s.user(t, user, rule) // made by admin; the client below logs in as it on db 1
			opts, err := redis.ParseURL("redis://" + user + ":pw-" + user + "@" + s.srv.Addr() + "/1")
			require.NoError(t, err)
			rdb := redis.NewClient(opts)
			t.Cleanup(func() { _ = rdb.Close() })
			c := padlock.New(rdb)
			defer c.Close()
			r, err := c.Check(ctx, "lock:doctor")
			require.NoError(t, err)
			logReport(t, r)
			acl := findings(r, "acl")
			if !tt.danger {
				assert.Empty(t, acl)
				cycleOK(t, r, true)
				return
			}
			require.Len(t, acl, 1, "one finding: SELECT")
			assert.Equal(t, padlock.Danger, acl[0].Severity)
			assert.Contains(t, acl[0].Problem, "SELECT")
			assert.NotContains(t, acl[0].Problem, "SUBSCRIBE")
			assert.Contains(t, acl[0].Fix, "+select")
		})
	}
}

// The commands Check probes are the README's minimal rule: a command added
// to one must be added to the other.
func TestCheckProbesTheREADMERule(t *testing.T) {
	t.Parallel()
	var rule []string
	for _, r := range readmeACL(t) {
		if strings.HasPrefix(r, "+") {
			rule = append(rule, r[1:])
		}
	}
	assert.Equal(t, rule, padlock.ACLCommands())
}

// A user who may not read INFO or CONFIG gets "not checked", not an error,
// and the report still has the cycle's result.
func TestCheckWithoutInfoOrConfig(t *testing.T) {
	t.Parallel()
	s := startMatrixServer(t, redistest.Servers(t)[0])
	c := padlock.New(s.user(t, "noinfo", s.prefixACL()))
	defer c.Close()
	require.NoError(t, s.admin.Do(t.Context(), "ACL", "SETUSER", "noinfo", "-info", "-config").Err())
	r, err := c.Check(t.Context(), "lock:doctor")
	require.NoError(t, err)
	logReport(t, r)
	require.Len(t, r.Nodes, 1)
	assert.Subset(t, r.Nodes[0].NotChecked, []string{"server", "replication", "persistence", "memory", "appendfsync"})
	settings := findings(r, "settings")
	require.Len(t, settings, 1)
	assert.Equal(t, padlock.Info, settings[0].Severity)
	assert.Contains(t, settings[0].Problem, "not checked")
	assert.Empty(t, findings(r, "persistence"), "not read, so not judged")
	assert.Empty(t, findings(r, "eviction"))
	cycleOK(t, r, true)
	assert.False(t, r.HasDanger())
}

// A replica attached to the primary, and no WithReplicas: a warning that a
// failover can lose a lock. With WithReplicas(1), none.
func TestCheckReplicas(t *testing.T) {
	longOnly(t)
	t.Parallel()
	srv := redistest.Start(t)
	redistest.StartReplica(t, srv)
	for _, tt := range []struct {
		name string
		opts []padlock.Option
		want int
	}{{"no WithReplicas", nil, 1}, {"WithReplicas(1)", []padlock.Option{padlock.WithReplicas(1, time.Second)}, 0}} {
		t.Run(tt.name, func(t *testing.T) {
			c := padlock.New(srv.Client(), tt.opts...)
			defer c.Close()
			r, err := c.Check(t.Context(), "lock:doctor")
			require.NoError(t, err)
			logReport(t, r)
			assert.Equal(t, 1, r.Nodes[0].Replicas)
			repl := findings(r, "replication")
			require.Len(t, repl, tt.want)
			if tt.want > 0 {
				assert.Equal(t, padlock.Warning, repl[0].Severity)
				assert.Contains(t, repl[0].Problem, "failover")
				assert.Contains(t, repl[0].Fix, "WithReplicas(1")
			}
			cycleOK(t, r, true)
		})
	}
}

// A Cluster has a node entry per master, a Redlock one per node; the
// cycle runs on both (without fencing on the Redlock).
func TestCheckClusterAndRedlock(t *testing.T) {
	longOnly(t)
	t.Parallel()
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		nodes, cc := startCluster(t)
		c := padlock.New(cc)
		defer c.Close()
		r, err := c.Check(t.Context(), "lock:doctor")
		require.NoError(t, err)
		logReport(t, r)
		var want, got []string
		for _, n := range nodes {
			want = append(want, n.Addr())
		}
		for _, n := range r.Nodes {
			got = append(got, n.Addr)
			assert.True(t, n.Cluster)
		}
		assert.ElementsMatch(t, want, got)
		cycleOK(t, r, true)
		assert.Empty(t, findings(r, "acl"))
		for _, n := range nodes {
			noKeysLeft(t, n.Client(), "*")
		}
	})
	t.Run("redlock", func(t *testing.T) {
		t.Parallel()
		var rdbs []redis.UniversalClient
		var srvs []*redistest.Server
		for range 3 {
			srv := redistest.Start(t)
			srvs = append(srvs, srv)
			rdbs = append(rdbs, srv.Client())
		}
		c := padlock.NewRedlock(rdbs)
		defer c.Close()
		r, err := c.Check(t.Context(), "lock:doctor")
		require.NoError(t, err)
		logReport(t, r)
		require.Len(t, r.Nodes, 3)
		cycleOK(t, r, false)
		for _, s := range srvs {
			noKeysLeft(t, s.Client(), "*")
		}
		// One node down: a warning, and the cycle still runs on the quorum.
		srvs[2].Stop()
		r, err = c.Check(t.Context(), "lock:doctor")
		require.NoError(t, err)
		logReport(t, r)
		down := findings(r, "server")
		require.NotEmpty(t, down)
		assert.Equal(t, srvs[2].Addr(), down[0].Node)
		assert.Error(t, r.Nodes[slices.IndexFunc(r.Nodes, func(n padlock.NodeInfo) bool { return n.Addr == srvs[2].Addr() })].Err)
		cycleOK(t, r, false)
	})
}

// A key in use is not touched: Check skips the cycle with a warning and
// the holder keeps its lock, value and fence counter.
func TestCheckLeavesAKeyInUseAlone(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	l, err := e.c.TryAcquire(e.ctx, e.key, time.Minute, padlock.WithFencing())
	require.NoError(t, err)
	before := e.raw.Get(e.ctx, e.key).Val()
	r, err := e.c.Check(e.ctx, e.key)
	require.NoError(t, err)
	logReport(t, r)
	require.Len(t, findings(r, "key"), 1)
	assert.Len(t, r.Cycle, 1, "only the first inspect ran")
	assert.Equal(t, before, e.raw.Get(e.ctx, e.key).Val())
	assert.Equal(t, "1", e.raw.Get(e.ctx, fenceKey(e.key)).Val())
	require.NoError(t, l.Release(e.ctx))
	// Released, the fence counter still says the key was used.
	r, err = e.c.Check(e.ctx, e.key)
	require.NoError(t, err)
	require.Len(t, findings(r, "key"), 1)
	assert.Equal(t, "1", e.raw.Get(e.ctx, fenceKey(e.key)).Val())
}

// A failed cycle leaves nothing behind either: here the user may not run
// ZADD, so the cycle fails when its waiter queues, after it took the lock.
func TestCheckCleansUpAFailedCycle(t *testing.T) {
	t.Parallel()
	s, r := checkWithout(t, "+zadd")
	cycle := findings(r, "cycle")
	require.NotEmpty(t, cycle, "the cycle failed")
	assert.Contains(t, cycle[0].Problem, "failed at wait")
	noKeysLeft(t, s.admin, "*")
}

// Bad input is ErrInvalid and touches nothing; a server that cannot be
// reached is an error (not a finding).
func TestCheckErrors(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer rdb.Close()
	c := padlock.New(rdb)
	defer c.Close()
	_, err := c.Check(t.Context(), "")
	require.ErrorIs(t, err, padlock.ErrInvalid)
	_, err = c.Check(t.Context(), "lock:{a")
	require.ErrorIs(t, err, padlock.ErrInvalid)
	_, err = padlock.New(nil).Check(t.Context(), "lock:a")
	require.ErrorIs(t, err, padlock.ErrInvalid)
	r, err := c.Check(t.Context(), "lock:a")
	require.Error(t, err)
	assert.NotErrorIs(t, err, padlock.ErrInvalid)
	assert.Contains(t, err.Error(), "connection refused")
	require.Len(t, r.Nodes, 1)
	assert.Error(t, r.Nodes[0].Err)
}

// Findings that the other tests do not reach: a Client that talks to a
// replica, WithReplicas asking for more replicas than there are,
// appendfsync no, a key pattern that does not admit the key, a waiter
// queued on the key (in use), a failover client named by its address.
func TestCheckMoreFindings(t *testing.T) {
	longOnly(t)
	t.Parallel()
	srv := redistest.Start(t)
	replica := redistest.StartReplica(t, srv)
	ctx := t.Context()
	t.Run("a replica", func(t *testing.T) {
		c := padlock.New(replica.Client())
		defer c.Close()
		r, err := c.Check(ctx, "lock:doctor")
		require.NoError(t, err)
		logReport(t, r)
		repl := findings(r, "replication")
		require.Len(t, repl, 1)
		assert.Equal(t, padlock.Danger, repl[0].Severity)
		assert.Contains(t, repl[0].Problem, "read-only replica")
		assert.Equal(t, "replica", r.Nodes[0].Role)
	})
	t.Run("WithReplicas(2) and one replica", func(t *testing.T) {
		c := padlock.New(srv.Client(), padlock.WithReplicas(2, 100*time.Millisecond))
		defer c.Close()
		r, err := c.Check(ctx, "lock:doctor")
		require.NoError(t, err)
		logReport(t, r)
		repl := findings(r, "replication")
		require.Len(t, repl, 1)
		assert.Equal(t, padlock.Danger, repl[0].Severity)
		assert.Contains(t, repl[0].Problem, "ErrNotReplicated")
		require.NotEmpty(t, findings(r, "cycle"), "the cycle failed too")
		noKeysLeft(t, srv.Client(), "*")
	})
	t.Run("appendfsync no", func(t *testing.T) {
		admin := srv.Client()
		require.NoError(t, admin.ConfigSet(ctx, "appendonly", "yes").Err())
		require.NoError(t, admin.ConfigSet(ctx, "appendfsync", "no").Err())
		defer admin.ConfigSet(ctx, "appendonly", "no")
		c := padlock.New(srv.Client(), padlock.WithReplicas(1, time.Second))
		defer c.Close()
		r, err := c.Check(ctx, "lock:doctor")
		require.NoError(t, err)
		logReport(t, r)
		p := findings(r, "persistence")
		require.Len(t, p, 1)
		assert.Contains(t, p[0].Problem, "appendfsync no")
		cycleOK(t, r, true)
	})
	t.Run("the key pattern", func(t *testing.T) {
		require.NoError(t, srv.Client().Do(ctx, "ACL", "SETUSER", "other", "on", ">pw", "~other:*", "&*", "+@all").Err())
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "other", Password: "pw"})
		defer rdb.Close()
		c := padlock.New(rdb)
		defer c.Close()
		r, err := c.Check(ctx, "lock:doctor")
		require.NoError(t, err)
		logReport(t, r)
		acl := findings(r, "acl")
		require.Len(t, acl, 1, "one finding for the key pattern, not one per command")
		assert.Contains(t, acl[0].Problem, "may not use the key")
		assert.Contains(t, acl[0].Fix, "~lock:doctor*")
	})
	t.Run("a waiter", func(t *testing.T) {
		c := padlock.New(srv.Client())
		defer c.Close()
		held, err := c.TryAcquire(ctx, "lock:waited", time.Minute)
		require.NoError(t, err)
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = padlock.New(srv.Client()).Acquire(wctx, "lock:waited", time.Minute)
		}()
		waitForOn(t, c, "lock:waited", 1)
		require.NoError(t, held.Release(ctx)) // the waiter gets it; now take it back and keep one waiting
		cancel()
		<-done
		other := padlock.New(srv.Client())
		defer other.Close()
		h2, err := other.Acquire(ctx, "lock:waited2", time.Minute)
		require.NoError(t, err)
		wctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() { _, _ = c.Acquire(wctx, "lock:waited2", time.Minute) }()
		waitForOn(t, c, "lock:waited2", 1)
		require.NoError(t, h2.Release(ctx))
		// Released with the waiter handed the lock: held. Drop the fence
		// question: an unfenced key with only a waiter must count as in use.
		r, err := c.Check(ctx, "lock:waited2")
		require.NoError(t, err)
		require.Len(t, findings(r, "key"), 1)
	})
	t.Run("a failover client", func(t *testing.T) {
		sentinel := redistest.StartSentinel(t, srv, "padlock")
		failover := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "padlock", SentinelAddrs: []string{sentinel.Addr()}})
		defer failover.Close()
		c := padlock.New(failover, padlock.WithReplicas(1, time.Second))
		defer c.Close()
		r, err := c.Check(ctx, "lock:doctor")
		require.NoError(t, err)
		logReport(t, r)
		assert.Equal(t, srv.Addr(), r.Nodes[0].Addr)
		cycleOK(t, r, true)
	})
}

// Checks at the same time on one key, and a holder using it meanwhile:
// no Check reports a false danger, and none deletes the other's lock or
// sets its fences back.
func TestCheckSharesTheKeySafely(t *testing.T) {
	t.Parallel()
	e := newReal(t, nil)
	other := padlock.New(e.rdb)
	defer other.Close()
	stop := make(chan struct{})
	user := make(chan error, 1)
	go func() { // a user of the key: its fences only grow, its locks stay its own
		last := int64(0)
		for {
			select {
			case <-stop:
				user <- nil
				return
			default:
			}
			l, err := other.TryAcquire(e.ctx, "lock:doctor", time.Minute, padlock.WithFencing())
			if errors.Is(err, padlock.ErrNotAcquired) {
				time.Sleep(time.Millisecond)
				continue
			}
			if err != nil {
				user <- err
				return
			}
			if l.Fence() <= last {
				user <- fmt.Errorf("fence %d after %d: the counter was reset", l.Fence(), last)
				return
			}
			last = l.Fence()
			time.Sleep(2 * time.Millisecond)
			if err := l.Extend(e.ctx, time.Minute); err != nil {
				user <- fmt.Errorf("the lock was taken from under its holder: %w", err)
				return
			}
			if err := l.Release(e.ctx); err != nil {
				user <- err
				return
			}
			time.Sleep(3 * time.Millisecond)
		}
	}()
	for range 10 {
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				r, err := e.c.Check(e.ctx, "lock:doctor")
				assert.NoError(t, err)
				assert.Empty(t, findings(r, "cycle"), "no false danger")
			})
		}
		wg.Wait()
	}
	close(stop)
	require.NoError(t, <-user)
}

// On a Redlock whose first node lost the key (an empty restart), Check
// sees it held on the others and leaves it; with the first node down, the
// cycle still runs on the quorum.
func TestCheckRedlockNodes(t *testing.T) {
	t.Parallel()
	var rdbs []redis.UniversalClient
	var srvs []*redistest.Server
	for range 3 {
		srv := redistest.Start(t)
		srvs, rdbs = append(srvs, srv), append(rdbs, srv.Client())
	}
	c := padlock.NewRedlock(rdbs)
	defer c.Close()
	ctx := t.Context()
	l, err := c.TryAcquire(ctx, "lock:job", time.Minute)
	require.NoError(t, err)
	require.NoError(t, srvs[0].Client().Del(ctx, "lock:job").Err())
	r, err := c.Check(ctx, "lock:job")
	require.NoError(t, err)
	logReport(t, r)
	require.Len(t, findings(r, "key"), 1)
	for _, s := range srvs[1:] {
		assert.Equal(t, l.Token(), unspanned(s.Client().Get(ctx, "lock:job").Val()), "left alone")
	}
	require.NoError(t, l.Release(ctx))

	srvs[0].Stop()
	r, err = c.Check(ctx, "lock:doctor")
	require.NoError(t, err)
	logReport(t, r)
	cycleOK(t, r, false)
	assert.False(t, r.HasDanger(), "a Redlock survives a minority")
}

// A context that ends during Check is an error, not a finding; so is a
// wrong password.
func TestCheckContextAndCredentials(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := padlock.New(srv.Client())
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Millisecond)
	defer cancel()
	_, err := c.Check(ctx, "lock:doctor")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	noKeysLeft(t, srv.Client(), "*")

	require.NoError(t, srv.Client().Do(t.Context(), "ACL", "SETUSER", "u", "on", ">right", "~*", "&*", "+@all").Err())
	wrongRDB := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "u", Password: "wrong"})
	defer wrongRDB.Close()
	wrong := padlock.New(wrongRDB)
	defer wrong.Close()
	_, err = wrong.Check(t.Context(), "lock:doctor")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "WRONGPASS")
}

// Without DEL, Check cannot clean up: it says so, runs no cycle, and what
// its probes wrote expires by itself.
func TestCheckWithoutDel(t *testing.T) {
	t.Parallel()
	s, r := checkWithout(t, "+del")
	assert.Empty(t, r.Cycle)
	require.Len(t, findings(r, "acl"), 1)
	keys, err := s.admin.Keys(t.Context(), "*").Result()
	require.NoError(t, err)
	for _, k := range keys {
		assert.Positive(t, s.admin.PTTL(t.Context(), k).Val(), "%s expires", k)
	}
}

// A Client made WithToken runs Check's cycle with two tokens of its own,
// not its chosen one twice: on a safe server it finds no danger.
func TestCheckWithAChosenTokenClient(t *testing.T) {
	t.Parallel()
	e := newReal(t, []redistest.Option{redistest.WithAOF()})
	c := padlock.New(e.rdb, padlock.WithToken("deploy-42"))
	defer c.Close()
	r, err := c.Check(e.ctx, "lock:doctor")
	require.NoError(t, err)
	logReport(t, r)
	cycleOK(t, r, true)
	assert.False(t, r.HasDanger())
}
