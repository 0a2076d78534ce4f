// Package drivertest is the conformance suite of padlock's drivers: Run
// runs padlock's behaviour, through its public API, on a driver under test,
// against real servers that it starts itself. An adapter whose tests pass
// Run keeps every promise padlock makes: a lock's cycle, waiting and the
// hand-off by pub/sub, first come first served, fencing, semaphores,
// shared holds, multi-key locks, KeepAlive and its batched renewals,
// Resume and Break, elections, Inspect, Check, WithMinHold and
// WithMaxHold, scripts that survive SCRIPT FLUSH, WithReplicas, a Cluster's
// routing and a slot that moves, a Sentinel failover, and Redlock.
//
// An adapter's test, for a client library "redigo" say, is all it takes:
//
//	func TestConformance(t *testing.T) {
//		drivertest.Run(t, drivertest.Setup{
//			New: func(t testing.TB, dep drivertest.Deployment, opts ...padlock.Option) *padlock.Client {
//				client := newRedigoClient(dep) // one server, a Cluster or a Sentinel: see Deployment
//				t.Cleanup(func() { client.Close() })
//				return padlock.NewDriver(adapter.Wrap(client), opts...)
//			},
//		})
//	}
//
// # Servers
//
// Run starts, once per call and shared by its tests, one server, a Cluster
// of three masters, a primary with a replica watched by a Sentinel, and
// (with Setup.NewRedlock) three more servers for a Redlock, each on a free
// loopback port, and kills them when the test ends. It runs the server
// binary that Setup.Server names, or else the one the environment variable
// PADLOCK_DRIVERTEST_SERVER names (a redis-server or valkey-server of any
// version padlock supports), or else redis-server from PATH. The Cluster
// is created with redis-cli, from PATH too; the Sentinel is the same
// binary in Sentinel mode.
//
// A binary that is missing skips what needs it (all of Run without a
// server, the Cluster without redis-cli), or, when the environment
// variable PADLOCK_REDIS is "required" (as in padlock's CI), fails it. A
// binary named by Setup.Server or PADLOCK_DRIVERTEST_SERVER that is not an
// executable file always fails: a typo must not turn a run into a skip.
//
// # Time
//
// Each check uses keys of its own, and the checks of a deployment run in
// parallel (t.Parallel), but for the bound checks of the one server, which
// run one at a time before the others: they time calls, and SlowServer's
// replies come 2s late, so they take some 21 seconds. Run takes some 25
// (with -parallel 2 as with 8, on 2 cores): PubSubIdle, which waits 11s
// (-short skips it), runs beside the bound checks, and the other
// deployments beside the one server; the Sentinel failover takes 3s. Its
// few bounds on time are far from what a working
// driver takes (a waiter served within a second of a release, where a
// ticket's renewal, which would serve it without pub/sub, comes every
// 2.5s), so a loaded machine does not make them fail.
//
// The suite leaves no goroutine behind once every Client and driver client
// is closed; it does not check that itself (it runs inside the adapter's
// tests): use go.uber.org/goleak in the adapter's TestMain for that.
package drivertest

import (
	"testing"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/driver"
)

// ServerEnv is the environment variable that names the server binary Run
// starts when Setup.Server is empty: a path, as
// /opt/valkey/bin/valkey-server. Unset or empty, Run starts redis-server
// from PATH.
const ServerEnv = "PADLOCK_DRIVERTEST_SERVER"

// A Deployment is what Setup.New connects a driver's client to.
type Deployment struct {
	// Kind is the kind of deployment: driver.Single, driver.Cluster or
	// driver.Sentinel. The Driver that padlock gets must report it.
	Kind driver.Kind
	// Addrs are host:port addresses: the one server (Single), every
	// master of the Cluster (Cluster), or the Sentinels (Sentinel). Each
	// call of Setup.New gets a slice of its own, which its client may
	// keep.
	Addrs []string
	// MasterName is the name the Sentinels know the primary by
	// (Sentinel only).
	MasterName string
}

// A Setup is the driver under test, as Run uses it.
type Setup struct {
	// New returns a padlock Client on a new client of the driver for dep,
	// with opts as the Client's defaults: padlock.NewDriver(d, opts...)
	// of the adapter's Driver d, or the adapter's own constructor. Each
	// call makes a new driver client: the suite uses several Clients
	// side by side, as several processes would. New arranges, with
	// t.Cleanup, for the driver's client to be closed when t ends; the
	// suite closes the padlock Client before that. New fails t (t.Fatal)
	// if it cannot make a client; it is called from the test's goroutine.
	New func(t testing.TB, dep Deployment, opts ...padlock.Option) *padlock.Client

	// NewRedlock, if not nil, returns a padlock Client over one new driver
	// client of each of deps (each a Single), as New does, for a Redlock:
	// the adapter's NewRedlock, or padlock's Redlock form of NewDriver.
	// Nil skips the Redlock checks.
	NewRedlock func(t testing.TB, deps []Deployment, opts ...padlock.Option) *padlock.Client

	// Kinds are the kinds of deployment the driver supports, and Run
	// checks: nil for all three. A driver without Sentinel support lists
	// driver.Single and driver.Cluster.
	Kinds []driver.Kind

	// Server is the path of the server binary to run (see the package
	// documentation); empty for PADLOCK_DRIVERTEST_SERVER, or redis-server
	// from PATH.
	Server string
}

// Run runs the conformance suite on the driver of s, each check a subtest
// of t: on one server, on a Cluster, on a Sentinel deployment (those of
// s.Kinds) and, with s.NewRedlock, on a Redlock of three servers. It
// blocks until every check has run, and fails t (as its subtests fail) if
// the driver breaks a promise. A nil s.New fails t.
func Run(t *testing.T, s Setup) {
	t.Helper()
	if s.New == nil {
		t.Fatal("drivertest: Setup.New is nil")
	}
	srv := newServers(t, s.Server)
	if srv == nil {
		return // skipped
	}
	parts := []struct {
		kind driver.Kind
		name string
		run  func(t *testing.T, s Setup, srv *servers)
	}{
		{driver.Single, "Single", runSingle},
		{driver.Cluster, "Cluster", runCluster},
		{driver.Sentinel, "Sentinel", runSentinel},
	}
	for _, p := range parts {
		if !s.supports(p.kind) {
			continue
		}
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			p.run(t, s, srv)
		})
	}
	if s.NewRedlock != nil {
		t.Run("Redlock", func(t *testing.T) {
			t.Parallel()
			runRedlock(t, s, srv)
		})
	}
}

// supports reports whether the driver of s supports deployments of kind.
func (s Setup) supports(kind driver.Kind) bool {
	if s.Kinds == nil {
		return true
	}
	for _, k := range s.Kinds {
		if k == kind {
			return true
		}
	}
	return false
}
