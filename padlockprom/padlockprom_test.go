package padlockprom_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/redistest"
	"github.com/padlock-go/padlock/padlockotel"
	"github.com/padlock-go/padlock/padlockprom"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// The metric names, as the package doc lists them.
var names = []string{
	"padlock_acquire_duration_seconds",
	"padlock_hold_duration_seconds",
	"padlock_held",
	"padlock_waiting",
	"padlock_lost_total",
	"padlock_renewals_total",
}

// A backend is a Redis server a test runs on: miniredis in the test's
// process (quick), or a real redis-server.
type backend struct {
	name  string
	start func(t *testing.T) *redis.Client
}

var backends = []backend{
	{"miniredis", func(t *testing.T) *redis.Client {
		rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}},
	{"redis", func(t *testing.T) *redis.Client { return redistest.Start(t).Client() }},
}

// scraper gathers a Collector through a pedantic registry of its own,
// which also checks that what it collects is what it describes.
type scraper struct {
	reg *prometheus.Registry
}

func newScraper(t *testing.T, c *padlockprom.Collector) *scraper {
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	return &scraper{reg: reg}
}

// metric returns the metric named name whose labels are exactly labels
// (name, value, name, value...), or nil.
func (s *scraper) metric(t *testing.T, name string, labels ...string) *dto.Metric {
	t.Helper()
	families, err := s.reg.Gather()
	require.NoError(t, err)
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if assert.ObjectsAreEqual(want, got) {
				return m
			}
		}
	}
	return nil
}

// value is the value of a counter or a gauge; the series must exist.
func (s *scraper) value(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	m := s.metric(t, name, labels...)
	require.NotNil(t, m, "%s%q is collected", name, labels)
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	}
	t.Fatalf("%s is neither a counter nor a gauge", name)
	return 0
}

// total is the sum of the values of a counter's series.
func (s *scraper) total(t *testing.T, name string) float64 {
	t.Helper()
	families, err := s.reg.Gather()
	require.NoError(t, err)
	var sum float64
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// histogram is the count and the sum of a histogram; the series must
// exist.
func (s *scraper) histogram(t *testing.T, name string, labels ...string) (uint64, float64) {
	t.Helper()
	m := s.metric(t, name, labels...)
	require.NotNil(t, m, "%s%q is collected", name, labels)
	require.NotNil(t, m.Histogram, "%s is a histogram", name)
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// otelMetrics is padlockotel on an SDK meter provider with a manual
// reader.
type otelMetrics struct {
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newOtel(t *testing.T) *otelMetrics {
	o := &otelMetrics{reader: sdkmetric.NewManualReader()}
	o.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(o.reader))
	t.Cleanup(func() { _ = o.mp.Shutdown(context.Background()) })
	return o
}

func (o *otelMetrics) instrument() padlock.Option {
	return padlockotel.Instrument(padlockotel.WithMeterProvider(o.mp))
}

func (o *otelMetrics) data(t *testing.T, name string) metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, o.reader.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m.Data
			}
		}
	}
	return nil
}

// sum is the value of an int64 sum with the attributes.
func (o *otelMetrics) sum(t *testing.T, name string, attrs ...attribute.KeyValue) int64 {
	t.Helper()
	data, _ := o.data(t, name).(metricdata.Sum[int64])
	want := attribute.NewSet(attrs...)
	for _, dp := range data.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp.Value
		}
	}
	return 0
}

// histogram is the count and the sum of a float64 histogram with the
// attributes.
func (o *otelMetrics) histogram(t *testing.T, name string, attrs ...attribute.KeyValue) (uint64, float64) {
	t.Helper()
	data, _ := o.data(t, name).(metricdata.Histogram[float64])
	want := attribute.NewSet(attrs...)
	for _, dp := range data.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp.Count, dp.Sum
		}
	}
	return 0, 0
}

// One Client instrumented with padlockotel and padlockprom at once, and
// one run of calls: acquired, extended and released; not acquired; a
// wait; an outage; a lock found gone by Extend; a kept-alive lease
// renewed, then deleted under Do. Every measure of the one equals the
// other's, and both count what the run did.
func TestAgreesWithPadlockotel(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			rdb := b.start(t)
			prom := padlockprom.New()
			scrape := newScraper(t, prom)
			otel := newOtel(t)
			c := padlock.New(rdb, otel.instrument(), prom.Instrument())
			t.Cleanup(func() { _ = c.Close() })
			other := padlock.New(rdb)
			t.Cleanup(func() { _ = other.Close() })
			ctx := t.Context()
			agree := func(msg string) {
				t.Helper()
				assert.Equal(t, float64(otel.sum(t, "padlock.held")), scrape.value(t, "padlock_held"), "held %s", msg)
				assert.Equal(t, float64(otel.sum(t, "padlock.waiting")), scrape.value(t, "padlock_waiting"), "waiting %s", msg)
			}

			// Acquired, extended, released.
			l, err := c.TryAcquire(ctx, "lock:a", time.Second)
			require.NoError(t, err)
			assert.Equal(t, float64(1), scrape.value(t, "padlock_held"), "held while held")
			agree("while held")
			require.NoError(t, l.Extend(ctx, 2*time.Second))
			require.NoError(t, l.Release(ctx))

			// Not acquired.
			held, err := other.TryAcquire(ctx, "lock:a", 10*time.Second)
			require.NoError(t, err)
			_, err = c.TryAcquire(ctx, "lock:a", time.Second)
			require.ErrorIs(t, err, padlock.ErrNotAcquired)

			// A wait, until the holder releases.
			waited := make(chan error, 1)
			go func() {
				l, err := c.Acquire(ctx, "lock:a", time.Second)
				if err == nil {
					err = l.Release(ctx)
				}
				waited <- err
			}()
			require.Eventually(t, func() bool { return scrape.value(t, "padlock_waiting") == 1 }, 10*time.Second, 5*time.Millisecond,
				"waiting = 1 during the wait")
			agree("while waiting")
			require.NoError(t, held.Release(ctx))
			require.NoError(t, <-waited)

			// An outage.
			down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
			t.Cleanup(func() { _ = down.Close() })
			dc := padlock.New(down, otel.instrument(), prom.Instrument())
			t.Cleanup(func() { _ = dc.Close() })
			_, err = dc.TryAcquire(ctx, "lock:b", time.Second)
			require.Error(t, err)
			require.NotErrorIs(t, err, padlock.ErrNotAcquired)

			// A lock deleted behind its holder's back, found gone by Extend.
			l, err = c.TryAcquire(ctx, "lock:e", time.Second)
			require.NoError(t, err)
			require.NoError(t, rdb.Del(ctx, "lock:e").Err())
			require.ErrorIs(t, l.Extend(ctx, time.Second), padlock.ErrNotHeld)

			// A kept-alive lease, renewed, then deleted under Do.
			err = c.Do(ctx, "lock:k", time.Second, func(kctx context.Context) error {
				require.Eventually(t, func() bool { return scrape.value(t, "padlock_renewals_total", "padlock_outcome", "ok") >= 1 },
					10*time.Second, 5*time.Millisecond, "renewed")
				require.NoError(t, rdb.Del(ctx, "lock:k").Err())
				select {
				case <-kctx.Done():
					return context.Cause(kctx)
				case <-time.After(10 * time.Second):
					return errors.New("the deleted lease is not lost after 10s")
				}
			})
			require.ErrorIs(t, err, padlock.ErrLost)
			// The end of a hold a renewal finds may be told on the
			// Client's own goroutine, after Do returns.
			require.Eventually(t, func() bool { return scrape.value(t, "padlock_lost_total") == 2 }, 10*time.Second, 5*time.Millisecond)

			want := map[string]uint64{"acquired": 4, "not_acquired": 1, "error": 1} // acquired: a, the waiter, e, k
			for outcome, n := range want {
				count, sum := scrape.histogram(t, "padlock_acquire_duration_seconds", "padlock_outcome", outcome)
				oCount, oSum := otel.histogram(t, "padlock.acquire.duration", attribute.String("padlock.outcome", outcome))
				assert.Equal(t, n, count, "acquires %s", outcome)
				assert.Equal(t, oCount, count, "acquires %s", outcome)
				assert.InDelta(t, oSum, sum, 1e-9, "acquire durations %s", outcome)
			}
			count, sum := scrape.histogram(t, "padlock_hold_duration_seconds")
			oCount, oSum := otel.histogram(t, "padlock.hold.duration")
			assert.Equal(t, uint64(4), count, "holds: two released, two lost")
			assert.Equal(t, oCount, count, "holds")
			assert.InDelta(t, oSum, sum, 1e-9, "hold durations")
			assert.Equal(t, float64(2), scrape.value(t, "padlock_lost_total"))
			assert.Equal(t, float64(otel.sum(t, "padlock.lost")), scrape.value(t, "padlock_lost_total"))
			for _, outcome := range []string{"ok", "failed"} {
				n := scrape.value(t, "padlock_renewals_total", "padlock_outcome", outcome)
				assert.GreaterOrEqual(t, n, float64(1), "renewals %s: at least the one seen, and the one that found it gone", outcome)
				assert.Equal(t, float64(otel.sum(t, "padlock.renewals", attribute.String("padlock.outcome", outcome))), n, "renewals %s", outcome)
			}
			assert.Zero(t, scrape.value(t, "padlock_held"), "held back to 0")
			assert.Zero(t, scrape.value(t, "padlock_waiting"), "waiting back to 0")
			agree("at the end")
		})
	}
}

// The metrics pass promlint (names, units, HELP) and carry no key by
// default: with every series there, after one call of each kind.
func TestLint(t *testing.T) {
	order := func(string) string { return "order" }
	tests := []struct {
		name   string
		opts   []padlockprom.Option
		labels map[string]string // every label name a series may have, and the value of padlock_key
	}{
		{"default", nil, map[string]string{"padlock_outcome": ""}},
		{"nil options", []padlockprom.Option{nil, padlockprom.WithKeyLabel(nil)}, map[string]string{"padlock_outcome": ""}},
		{"WithKeyLabel", []padlockprom.Option{padlockprom.WithKeyLabel(order)}, map[string]string{"padlock_outcome": "", "padlock_key": "order"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rdb := backends[0].start(t)
			prom := padlockprom.New(tt.opts...)
			scrape := newScraper(t, prom)
			c := padlock.New(rdb, prom.Instrument())
			t.Cleanup(func() { _ = c.Close() })
			ctx := t.Context()

			l, err := c.TryAcquire(ctx, "lock:order:1", time.Second)
			require.NoError(t, err)
			_, err = c.TryAcquire(ctx, "lock:order:1", time.Second)
			require.ErrorIs(t, err, padlock.ErrNotAcquired)
			require.NoError(t, rdb.Del(ctx, "lock:order:1").Err())
			require.ErrorIs(t, l.Extend(ctx, time.Second), padlock.ErrNotHeld) // lost
			err = c.TryDo(ctx, "lock:order:2", 300*time.Millisecond, func(context.Context) error {
				require.Eventually(t, func() bool { return scrape.total(t, "padlock_renewals_total") >= 1 },
					10*time.Second, 5*time.Millisecond, "renewed")
				return nil
			})
			require.NoError(t, err)

			problems, err := testutil.CollectAndLint(prom)
			require.NoError(t, err)
			assert.Empty(t, problems)
			for _, name := range names {
				assert.Positive(t, testutil.CollectAndCount(prom, name), "%s is collected", name)
			}
			families, err := scrape.reg.Gather()
			require.NoError(t, err)
			require.Len(t, families, len(names), "no other metric")
			for _, f := range families {
				assert.NotEmpty(t, f.GetHelp(), f.GetName())
				for _, m := range f.GetMetric() {
					for _, l := range m.GetLabel() {
						want, ok := tt.labels[l.GetName()]
						assert.True(t, ok, "%s has label %s", f.GetName(), l.GetName())
						if want != "" {
							assert.Equal(t, want, l.GetValue(), "%s's %s", f.GetName(), l.GetName())
						}
					}
				}
			}
		})
	}
}

// WithKeyLabel: every measure by the mapped key, on real Redis.
func TestWithKeyLabel(t *testing.T) {
	rdb := backends[1].start(t)
	kind := func(key string) string {
		if key == "lock:invoice:7" {
			return "invoice"
		}
		return "order"
	}
	prom := padlockprom.New(padlockprom.WithKeyLabel(kind))
	scrape := newScraper(t, prom)
	c := padlock.New(rdb, prom.Instrument())
	t.Cleanup(func() { _ = c.Close() })
	other := padlock.New(rdb)
	t.Cleanup(func() { _ = other.Close() })
	ctx := t.Context()
	order := []string{"padlock_key", "order"}
	invoice := []string{"padlock_key", "invoice"}

	o1, err := c.TryAcquire(ctx, "lock:order:1", time.Second)
	require.NoError(t, err)
	o2, err := c.TryAcquire(ctx, "lock:order:2", time.Second)
	require.NoError(t, err)
	held, err := other.TryAcquire(ctx, "lock:invoice:7", 10*time.Second)
	require.NoError(t, err)
	waited := make(chan error, 1)
	go func() {
		l, err := c.Acquire(ctx, "lock:invoice:7", time.Second)
		if err == nil {
			err = l.Release(ctx)
		}
		waited <- err
	}()
	require.Eventually(t, func() bool {
		m := scrape.metric(t, "padlock_waiting", invoice...)
		return m != nil && m.GetGauge().GetValue() == 1
	}, 10*time.Second, 5*time.Millisecond, "the invoice waits")
	assert.Equal(t, float64(2), scrape.value(t, "padlock_held", order...))
	assert.Equal(t, float64(0), scrape.value(t, "padlock_held", invoice...))
	assert.Equal(t, float64(0), scrape.value(t, "padlock_waiting", order...))
	require.NoError(t, held.Release(ctx))
	require.NoError(t, <-waited)
	require.NoError(t, o1.Release(ctx))
	require.NoError(t, rdb.Del(ctx, "lock:order:2").Err())
	require.ErrorIs(t, o2.Extend(ctx, time.Second), padlock.ErrNotHeld)

	count, _ := scrape.histogram(t, "padlock_acquire_duration_seconds", append(order, "padlock_outcome", "acquired")...)
	assert.Equal(t, uint64(2), count)
	count, _ = scrape.histogram(t, "padlock_acquire_duration_seconds", append(invoice, "padlock_outcome", "acquired")...)
	assert.Equal(t, uint64(1), count)
	count, _ = scrape.histogram(t, "padlock_hold_duration_seconds", order...)
	assert.Equal(t, uint64(2), count)
	count, _ = scrape.histogram(t, "padlock_hold_duration_seconds", invoice...)
	assert.Equal(t, uint64(1), count)
	assert.Equal(t, float64(1), scrape.value(t, "padlock_lost_total", order...))
	assert.Nil(t, scrape.metric(t, "padlock_lost_total", invoice...), "no invoice was lost")
	for _, k := range [][]string{order, invoice} {
		assert.Zero(t, scrape.value(t, "padlock_held", k...))
		assert.Zero(t, scrape.value(t, "padlock_waiting", k...))
	}
}

// One Collector, several Clients: a Client on one server and a Redlock on
// three; their locks add up.
func TestOneCollectorManyClients(t *testing.T) {
	prom := padlockprom.New()
	scrape := newScraper(t, prom)
	var nodes []redis.UniversalClient
	for range 3 {
		nodes = append(nodes, backends[0].start(t))
	}
	single := padlock.New(backends[0].start(t), prom.Instrument())
	t.Cleanup(func() { _ = single.Close() })
	rl := padlock.NewRedlock(nodes, prom.Instrument())
	t.Cleanup(func() { _ = rl.Close() })
	ctx := t.Context()

	// A minute: a Redlock gives each node a tenth of the ttl to answer.
	l1, err := single.TryAcquire(ctx, "lock:x", time.Minute)
	require.NoError(t, err)
	l2, err := rl.TryAcquire(ctx, "lock:x", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, float64(2), scrape.value(t, "padlock_held"))
	require.NoError(t, l1.Release(ctx))
	require.NoError(t, l2.Release(ctx))
	assert.Zero(t, scrape.value(t, "padlock_held"))
	count, _ := scrape.histogram(t, "padlock_hold_duration_seconds")
	assert.Equal(t, uint64(2), count)
}
