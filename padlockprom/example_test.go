package padlockprom_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/padlockprom"
)

// A Client's locks as Prometheus metrics, read here from the registry; in
// a service, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}) serves them
// at /metrics.
func ExampleNew() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	metrics := padlockprom.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics)
	locks := padlock.New(rdb, metrics.Instrument())
	defer locks.Close()

	ctx := context.Background()
	_ = locks.TryDo(ctx, "lock:report:daily", time.Minute, func(ctx context.Context) error {
		_, err := locks.TryAcquire(ctx, "lock:report:daily", time.Minute) // another instance's try
		fmt.Println("second try:", err != nil)
		printMetrics(reg, "padlock_held")
		return nil
	})
	printMetrics(reg)
	// Output:
	// second try: true
	// padlock_held 1
	// padlock_acquire_duration_seconds{padlock_outcome="acquired"} 1 observed
	// padlock_acquire_duration_seconds{padlock_outcome="error"} 0 observed
	// padlock_acquire_duration_seconds{padlock_outcome="not_acquired"} 1 observed
	// padlock_held 0
	// padlock_hold_duration_seconds 1 observed
	// padlock_lost_total 0
	// padlock_renewals_total{padlock_outcome="failed"} 0
	// padlock_renewals_total{padlock_outcome="ok"} 0
	// padlock_waiting 0
}

// Locks labelled by their kind, a bounded set, never by their key.
func ExampleWithKeyLabel() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	kind := func(key string) string { return strings.Split(key, ":")[1] } // "lock:order:42" is an "order"
	metrics := padlockprom.New(padlockprom.WithKeyLabel(kind))
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics)
	locks := padlock.New(rdb, metrics.Instrument())
	defer locks.Close()

	ctx := context.Background()
	for _, key := range []string{"lock:order:42", "lock:order:43", "lock:invoice:7"} {
		l, err := locks.TryAcquire(ctx, key, time.Minute)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer l.Release(ctx)
	}
	printMetrics(reg, "padlock_acquire_duration_seconds", "padlock_held")
	// Output:
	// padlock_acquire_duration_seconds{padlock_key="invoice",padlock_outcome="acquired"} 1 observed
	// padlock_acquire_duration_seconds{padlock_key="order",padlock_outcome="acquired"} 2 observed
	// padlock_held{padlock_key="invoice"} 1
	// padlock_held{padlock_key="order"} 2
}

// printMetrics prints the metrics of reg named names (all, without names),
// one line each: a histogram's count, a counter's or a gauge's value.
func printMetrics(reg prometheus.Gatherer, names ...string) {
	families, err := reg.Gather()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, f := range families {
		if len(names) > 0 && !slices.Contains(names, f.GetName()) {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			name := f.GetName()
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.Histogram != nil:
				fmt.Println(name, m.GetHistogram().GetSampleCount(), "observed")
			case m.Counter != nil:
				fmt.Println(name, m.GetCounter().GetValue())
			case m.Gauge != nil:
				fmt.Println(name, m.GetGauge().GetValue())
			}
		}
	}
}
