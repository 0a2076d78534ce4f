// Package padlockrueidis runs padlock on a rueidis client
// (github.com/redis/rueidis): New and NewRedlock are padlock.New and
// padlock.NewRedlock for a rueidis.Client, with every feature of padlock
// (waiting and hand-off, fencing, semaphores, shared holds, multi-key
// locks, Redlock, WithReplicas, elections, Check, Inspect...) on one
// server, a Cluster or a Sentinel-watched primary.
//
// A rueidis client and a go-redis client of padlock on the same key are
// one lock: one queue, first come first served across both, and one fence
// counter. rueidis pipelines the commands of concurrent goroutines by
// itself (auto-pipelining).
//
// # Client settings
//
// padlock sends its commands (EVALSHA, EVAL and the rest, built with
// Builder.Arbitrary: writes, IsReadOnly false) through Client.Do, a batch
// through DoMulti, and takes connections of its own with Dedicate for
// pub/sub (SetPubSubHooks), for a write followed by WAIT, and, while a
// Client has waiters, one per node with CLIENT TRACKING on, whose
// invalidations (SetOnInvalidations) tell padlock that something else
// freed a key its waiters wait for. It never uses
// DoCache, nor rueidis.NewLuaScript (which computes SHA-1 digests in the
// process, which GODEBUG=fips140=only forbids): padlock loads its scripts
// with SCRIPT LOAD.
//
//   - A client that sends padlock's commands to a replica is refused:
//     ClientOption.ReplicaOnly, a SendToReplicas that returns true for
//     them, or a client of a replica's address. New asks the node padlock's
//     commands go to for its role (HELLO, or ROLE on Redis 6.0); every call
//     of the returned Client then fails with an error that matches
//     padlock.ErrInvalid and names the setting, or, for a client of one
//     address that is a replica's, says so and to point the client at the
//     primary (named when the replica answers ROLE). A SendToReplicas that sends
//     reads alone (cmd.IsReadOnly()) is fine. On a Cluster the node asked
//     is the master of slot 0 (a ReplicaOnly client sends to a shard's
//     replicas only where the shard has some).
//   - Client-side caching (on by default) is harmless: padlock reads
//     nothing from the cache, and the invalidations rueidis receives on a
//     pub/sub connection are rueidis's, not padlock's messages. With
//     padlock's least ACL rule (see padlock's README), which does not
//     allow CLIENT TRACKING, set DisableCache.
//   - DisableAutoPipelining, AlwaysPipelining, PipelineMultiplex and
//     MaxFlushDelay are harmless too, and so is AlwaysRESP2, with one
//     difference: rueidis then keeps a connection's subscriptions on a
//     second connection of its own, which its keep-alive watches, while
//     padlock's health PING goes to the first; and a RESP2 connection hears
//     no invalidation, so its Client reads the keys its waiters wait for
//     every 100ms instead (Check says so).
//
// rueidis answers ErrClosing after Client.Close, and also for a connection
// it closed itself (a node a Cluster's topology no longer lists); an error
// of a closed client matches padlock.ErrClosed only in the first case.
package padlockrueidis

import (
	"context"
	"fmt"
	"sync"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/driver"
	"github.com/redis/rueidis"
)

// New returns a padlock Client that takes locks through c: a rueidis
// client of one server, a Cluster or a Sentinel-watched primary. The
// options set the Client's defaults, as for padlock.New.
//
// New asks the node padlock's commands go to whether it is a primary (one
// round trip, up to 5s; see Client settings in the package doc), and
// starts no goroutine. A nil c, a client in a mode padlock does not run
// on, or one that sends padlock's commands to a replica, is not a panic:
// every call on the returned Client fails with an error that matches
// padlock.ErrInvalid (padlock.ErrUnsupported for the mode), naming what
// is wrong. If the node does not answer in time, the Client's first calls
// ask again. The Client never closes c: close it after the Client's Close.
func New(c rueidis.Client, opts ...padlock.Option) *padlock.Client {
	d, err := newDriver(c)
	if err != nil {
		return padlock.NewDriver(refusal{err}, opts...)
	}
	if err := probe([]*rueidisDriver{d}); err != nil {
		return padlock.NewDriver(refusal{err}, opts...)
	}
	return padlock.NewDriver(d, opts...)
}

// NewRedlock returns a padlock Client whose locks live on the independent
// primaries cs at once, as padlock.NewRedlock's. It asks each of cs, at
// once, as New does; if any is refused, so is the Client: every call fails
// with that node's error. The Client never closes cs.
func NewRedlock(cs []rueidis.Client, opts ...padlock.Option) *padlock.Client {
	ds := make([]*rueidisDriver, len(cs))
	shared := &verdict{}
	for i, c := range cs {
		d, err := newDriver(c)
		if err != nil {
			return refusedRedlock(len(cs), fmt.Errorf("node %d: %w", i, err), opts)
		}
		d.gate.shared = shared
		ds[i] = d
	}
	if len(cs) == 0 {
		return padlock.NewDriverRedlock(nil, opts...)
	}
	if err := probe(ds); err != nil {
		return refusedRedlock(len(cs), err, opts)
	}
	nodes := make([]driver.Driver, len(ds))
	for i, d := range ds {
		nodes[i] = d
	}
	return padlock.NewDriverRedlock(nodes, opts...)
}

func refusedRedlock(n int, err error, opts []padlock.Option) *padlock.Client {
	nodes := make([]driver.Driver, n)
	for i := range nodes {
		nodes[i] = refusal{err}
	}
	return padlock.NewDriverRedlock(nodes, opts...)
}

// probe asks each of ds, at once, where its client sends padlock's
// commands (see gate), and returns the first refusal. A node that does
// not answer within probeTimeout is asked again by its first call.
func probe(ds []*rueidisDriver) error {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, d := range ds {
		wg.Go(func() { _ = d.gate.pass(ctx, d) })
	}
	wg.Wait()
	for _, d := range ds {
		if err := d.gate.shared.refused(); err != nil {
			return err
		}
	}
	return nil
}

// A refusal is a Driver whose every call fails with err: a client padlock
// cannot run on.
type refusal struct{ err error }

func (r refusal) Kind() driver.Kind { return driver.Single }

func (r refusal) Do(context.Context, string, ...any) (any, error) { return nil, r.err }

func (r refusal) Batch(_ context.Context, cmds []driver.Cmd) { failAll(cmds, r.err) }

func (r refusal) PubSub(context.Context, string) (driver.PubSub, error) { return nil, r.err }

func (r refusal) Pin(context.Context, string) (driver.Conn, error) { return nil, r.err }

func (r refusal) Nodes(context.Context) ([]driver.Node, error) { return nil, r.err }
