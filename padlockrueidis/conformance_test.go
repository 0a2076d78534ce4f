package padlockrueidis_test

import (
	"testing"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/driver"
	"github.com/padlock-go/padlock/driver/drivertest"
	"github.com/padlock-go/padlock/padlockrueidis"
)

// clientOf returns a rueidis client of dep, closed when t ends.
func clientOf(t testing.TB, dep drivertest.Deployment) rueidis.Client {
	t.Helper()
	opt := rueidis.ClientOption{InitAddress: dep.Addrs}
	if dep.Kind == driver.Sentinel {
		opt.Sentinel.MasterSet = dep.MasterName
	}
	c, err := rueidis.NewClient(opt)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// padlock's conformance suite, on rueidis: one server, a Cluster of three
// masters, a primary and its replica under a Sentinel, and a Redlock.
func TestConformance(t *testing.T) {
	drivertest.Run(t, drivertest.Setup{
		New: func(t testing.TB, dep drivertest.Deployment, opts ...padlock.Option) *padlock.Client {
			return padlockrueidis.New(clientOf(t, dep), opts...)
		},
		NewRedlock: func(t testing.TB, deps []drivertest.Deployment, opts ...padlock.Option) *padlock.Client {
			cs := make([]rueidis.Client, len(deps))
			for i, dep := range deps {
				cs[i] = clientOf(t, dep)
			}
			return padlockrueidis.NewRedlock(cs, opts...)
		},
	})
}
