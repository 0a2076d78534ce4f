package drivertest_test

import (
	"context"
	"flag"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/driver"
	"github.com/padlock-go/padlock/driver/drivertest"
)

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{}) // the failover and the node stopped fill the log with dial errors
	// The checks mostly wait on their servers: run eight at a time, not
	// GOMAXPROCS, unless -parallel is given.
	flag.Parse()
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		_ = flag.Set("test.parallel", "8")
	}
	// go-redis (before v9.8) redials a server that refused connections
	// from a goroutine of its own, which ends by itself within a second of
	// the client's Close; it is not padlock's. On a failover client that
	// redial asks the Sentinels for the primary, and go-redis v9.0.5 sets
	// up its Sentinel watch anew when the client's Close comes during that
	// redial: goroutines that no Close ends (red once in CI's Go 1.25
	// step), go-redis's too.
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
		goleak.IgnoreTopFunction("github.com/redis/go-redis/v9.(*sentinelFailover).listen"),
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9.(*channel).initHealthCheck.func1"),
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9.(*channel).initMsgChan.func1"),
	)
}

// quiet is a go-redis logger that drops everything.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// The conformance suite on go-redis, padlock's own driver: a *redis.Client
// for one server, a *redis.ClusterClient, a failover client for Sentinel,
// and a Redlock of *redis.Clients.
func TestGoRedis(t *testing.T) {
	drivertest.Run(t, drivertest.Setup{
		New: func(t testing.TB, dep drivertest.Deployment, opts ...padlock.Option) *padlock.Client {
			rdb := goRedis(dep)
			t.Cleanup(func() { _ = rdb.Close() })
			return padlock.New(rdb, opts...)
		},
		NewRedlock: func(t testing.TB, deps []drivertest.Deployment, opts ...padlock.Option) *padlock.Client {
			var rdbs []redis.UniversalClient
			for _, dep := range deps {
				rdb := goRedis(dep)
				t.Cleanup(func() { _ = rdb.Close() })
				rdbs = append(rdbs, rdb)
			}
			return padlock.NewRedlock(rdbs, opts...)
		},
	})
}

// goRedis returns a go-redis client of dep.
func goRedis(dep drivertest.Deployment) redis.UniversalClient {
	switch dep.Kind {
	case driver.Cluster:
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: dep.Addrs})
	case driver.Sentinel:
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: dep.MasterName, SentinelAddrs: dep.Addrs})
	}
	return redis.NewClient(&redis.Options{Addr: dep.Addrs[0]})
}
