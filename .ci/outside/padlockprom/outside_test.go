// A module outside the repository that requires padlockprom as a user's
// `go get` does (.ci/run copies this file into it): the lock's acquire and
// hold are collected.
package outside

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/padlock-go/padlock/padlockprom"
	"github.com/padlock-go/padlock/padlocktest"
)

func TestInstrumented(t *testing.T) {
	metrics := padlockprom.New()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics)
	locks, _ := padlocktest.New(t, metrics.Instrument())

	l, err := locks.TryAcquire(t.Context(), "lock:outside", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var acquired uint64
	for _, f := range families {
		if f.GetName() != "padlock_acquire_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == "acquired" {
				acquired = m.GetHistogram().GetSampleCount()
			}
		}
	}
	if acquired != 1 {
		t.Fatalf("%d acquires observed, want 1: %v", acquired, families)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", err, problems)
	}
}
