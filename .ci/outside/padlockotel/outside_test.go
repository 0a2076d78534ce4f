// A module outside the repository that requires padlockotel as a user's
// `go get` does (.ci/run copies this file into it): the lock's acquire is
// recorded.
package outside

import (
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/padlock-go/padlock/padlockotel"
	"github.com/padlock-go/padlock/padlocktest"
)

func TestInstrumented(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(t.Context()) })
	locks, _ := padlocktest.New(t, padlockotel.Instrument(padlockotel.WithMeterProvider(mp)))

	l, err := locks.TryAcquire(t.Context(), "lock:outside", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == "padlock.acquire.duration" && len(h.DataPoints) == 1 {
				return
			}
		}
	}
	t.Fatalf("no padlock.acquire.duration recorded: %+v", rm.ScopeMetrics)
}
