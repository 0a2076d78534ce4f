package padlockotel_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/redistest"
	"github.com/padlock-go/padlock/padlockotel"
)

// BenchmarkTryAcquireRelease measures what instrumenting costs one
// uncontended TryAcquire + Release on a real redis-server: plain, and with
// an SDK meter provider and a tracer that records every span.
func BenchmarkTryAcquireRelease(b *testing.B) {
	srv := redistest.Start(b)
	for _, instrumented := range []bool{false, true} {
		name := "otel=off"
		var opts []padlock.Option
		if instrumented {
			name = "otel=on"
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
			b.Cleanup(func() { _ = mp.Shutdown(context.Background()); _ = tp.Shutdown(context.Background()) })
			opts = append(opts, padlockotel.Instrument(padlockotel.WithMeterProvider(mp), padlockotel.WithTracerProvider(tp)))
		}
		b.Run(name, func(b *testing.B) {
			rdb := srv.Client()
			c := padlock.New(rdb, opts...)
			b.Cleanup(func() { _ = c.Close() })
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				l, err := c.TryAcquire(ctx, "lock:bench", time.Second)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
