package padlockotel_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/padlockotel"
)

// Metrics of a Client's locks, read here with the SDK's manual reader; in
// a service, mp is the MeterProvider your exporter (Prometheus, OTLP)
// reads.
func ExampleInstrument() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())

	locks := padlock.New(rdb, padlockotel.Instrument(
		padlockotel.WithMeterProvider(mp),
		padlockotel.WithKeyAttribute(func(key string) string { return "report" }), // a bounded set
	))
	ctx := context.Background()
	_ = locks.TryDo(ctx, "lock:report:daily", time.Minute, func(ctx context.Context) error {
		_, err := locks.TryAcquire(ctx, "lock:report:daily", time.Minute) // another instance's try
		fmt.Println("second try:", err != nil)
		return nil
	})

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(ctx, &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch data := m.Data.(type) {
		case metricdata.Histogram[float64]:
			for _, dp := range data.DataPoints {
				name := m.Name
				if outcome, ok := dp.Attributes.Value("padlock.outcome"); ok {
					name += " " + outcome.String()
				}
				fmt.Printf("%s: %d recorded\n", name, dp.Count)
			}
		case metricdata.Sum[int64]:
			for _, dp := range data.DataPoints {
				fmt.Printf("%s: %d\n", m.Name, dp.Value)
			}
		}
	}
	// Unordered output:
	// second try: true
	// padlock.acquire.duration acquired: 1 recorded
	// padlock.acquire.duration not_acquired: 1 recorded
	// padlock.held: 0
	// padlock.hold.duration: 1 recorded
}
