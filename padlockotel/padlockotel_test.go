package padlockotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/padlock-go/padlock"
	"github.com/padlock-go/padlock/internal/redistest"
	"github.com/padlock-go/padlock/padlockotel"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// telemetry is an SDK meter and tracer provider whose output a test reads.
type telemetry struct {
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	mp     *sdkmetric.MeterProvider
	tp     *sdktrace.TracerProvider
}

func newTelemetry(t *testing.T) *telemetry {
	tm := &telemetry{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	tm.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(tm.reader))
	tm.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tm.spans))
	t.Cleanup(func() {
		_ = tm.mp.Shutdown(context.Background())
		_ = tm.tp.Shutdown(context.Background())
	})
	return tm
}

func (tm *telemetry) instrument(opts ...padlockotel.Option) padlock.Option {
	return padlockotel.Instrument(append([]padlockotel.Option{
		padlockotel.WithMeterProvider(tm.mp), padlockotel.WithTracerProvider(tm.tp)}, opts...)...)
}

// metric returns the collected metric named name.
func (tm *telemetry) metric(t *testing.T, name string) metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, tm.reader.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		assert.Equal(t, padlockotel.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m.Data
			}
		}
	}
	return nil
}

// sum is the value of an int64 sum metric with the given attributes.
func (tm *telemetry) sum(t *testing.T, name string, attrs ...attribute.KeyValue) int64 {
	t.Helper()
	data, ok := tm.metric(t, name).(metricdata.Sum[int64])
	if !ok {
		return 0
	}
	want := attribute.NewSet(attrs...)
	for _, dp := range data.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp.Value
		}
	}
	return 0
}

// histogram is the data point of a float64 histogram with the attributes.
func (tm *telemetry) histogram(t *testing.T, name string, attrs ...attribute.KeyValue) metricdata.HistogramDataPoint[float64] {
	t.Helper()
	data, ok := tm.metric(t, name).(metricdata.Histogram[float64])
	require.True(t, ok, "%s is a float64 histogram", name)
	want := attribute.NewSet(attrs...)
	for _, dp := range data.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp
		}
	}
	return metricdata.HistogramDataPoint[float64]{}
}

func outcome(s string) attribute.KeyValue { return attribute.String("padlock.outcome", s) }

// One run on real Redis: an uncontended acquire, a conflict, a wait of
// ~300ms, an outage, and a kept-alive lease renewed and then taken away;
// then every metric and span.
func TestMetricsAndSpans(t *testing.T) {
	srv := redistest.Start(t)
	tm := newTelemetry(t)
	c := padlock.New(srv.Client(), tm.instrument())
	defer c.Close()
	other := padlock.New(srv.Client())
	admin := srv.Client()
	ctx, job := tm.tp.Tracer("test").Start(t.Context(), "job")

	// Uncontended, fenced.
	l, err := c.TryAcquire(ctx, "lock:a", time.Second, padlock.WithFencing())
	require.NoError(t, err)
	assert.Equal(t, int64(1), tm.sum(t, "padlock.held"), "held while held")
	require.NoError(t, l.Release(ctx))

	// A conflict.
	held, err := other.TryAcquire(ctx, "lock:a", 10*time.Second)
	require.NoError(t, err)
	_, err = c.TryAcquire(ctx, "lock:a", time.Second)
	require.ErrorIs(t, err, padlock.ErrNotAcquired)

	// A wait of ~300ms.
	waited := make(chan error, 1)
	go func() {
		l, err := c.Acquire(ctx, "lock:a", time.Second)
		if err == nil {
			err = l.Release(ctx)
		}
		waited <- err
	}()
	require.Eventually(t, func() bool { return tm.sum(t, "padlock.waiting") == 1 }, 2*time.Second, 5*time.Millisecond,
		"waiting = 1 during the wait")
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, held.Release(ctx))
	require.NoError(t, <-waited)
	assert.Zero(t, tm.sum(t, "padlock.waiting"), "waiting back to 0")

	// An outage.
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer down.Close()
	_, err = padlock.New(down, tm.instrument()).TryAcquire(ctx, "lock:b", time.Second)
	require.Error(t, err)

	// A kept-alive lease, renewed, then taken away.
	l, err = c.TryAcquire(ctx, "lock:c", 300*time.Millisecond)
	require.NoError(t, err)
	kctx, stop := l.KeepAlive(ctx)
	defer stop()
	time.Sleep(380 * time.Millisecond) // renewals every 100ms: three, or at least two on a loaded machine
	require.NoError(t, admin.Del(ctx, "lock:c").Err())
	<-kctx.Done()
	require.Eventually(t, func() bool { return tm.sum(t, "padlock.lost") == 1 }, time.Second, 5*time.Millisecond)
	job.End()

	acquired := tm.histogram(t, "padlock.acquire.duration", outcome("acquired"))
	assert.Equal(t, uint64(3), acquired.Count, "acquired: uncontended, waited, lease")
	maxWait, ok := acquired.Max.Value()
	require.True(t, ok)
	assert.GreaterOrEqual(t, maxWait, 0.3, "the wait's duration is recorded")
	assert.Equal(t, uint64(1), tm.histogram(t, "padlock.acquire.duration", outcome("not_acquired")).Count)
	assert.Equal(t, uint64(1), tm.histogram(t, "padlock.acquire.duration", outcome("error")).Count)
	assert.Equal(t, uint64(3), tm.histogram(t, "padlock.hold.duration").Count, "two released, one lost")
	assert.Zero(t, tm.sum(t, "padlock.held"), "held back to 0")
	assert.Equal(t, int64(1), tm.sum(t, "padlock.lost"))
	assert.GreaterOrEqual(t, tm.sum(t, "padlock.renewals", outcome("ok")), int64(2))
	assert.Equal(t, int64(1), tm.sum(t, "padlock.renewals", outcome("failed")), "the renewal that found it gone")

	var acquires, releases []sdktrace.ReadOnlySpan
	for _, s := range tm.spans.Ended() {
		switch s.Name() {
		case "padlock.acquire":
			acquires = append(acquires, s)
		case "padlock.release":
			releases = append(releases, s)
		}
	}
	require.Len(t, acquires, 5)
	require.Len(t, releases, 2, "the uncontended and the waited lock")
	wantOutcomes := []string{"acquired", "not_acquired", "acquired", "error", "acquired"}
	for i, s := range acquires {
		attrs := attribute.NewSet(s.Attributes()...)
		v, _ := (&attrs).Value("padlock.outcome")
		assert.Equal(t, wantOutcomes[i], v.AsString(), "span %d", i)
		assert.Equal(t, job.SpanContext().SpanID(), s.Parent().SpanID(), "a child of the caller's span")
		_, hasWait := (&attrs).Value("padlock.acquire.wait")
		assert.True(t, hasWait)
		fence, hasFence := (&attrs).Value("padlock.fence")
		assert.Equal(t, i == 0, hasFence, "fence only when fenced")
		if i == 0 {
			assert.Equal(t, int64(1), fence.AsInt64())
		}
		if wantOutcomes[i] == "error" {
			assert.Equal(t, codes.Error, s.Status().Code)
			assert.NotEmpty(t, s.Events(), "the error is recorded")
		} else {
			assert.Equal(t, codes.Unset, s.Status().Code)
		}
	}
	first := attribute.NewSet(acquires[0].Attributes()...)
	key, _ := first.Value("padlock.key")
	assert.Equal(t, "lock:a", key.AsString())
	for _, s := range releases {
		attrs := attribute.NewSet(s.Attributes()...)
		v, _ := attrs.Value("padlock.outcome")
		assert.Equal(t, "released", v.AsString())
	}
}

// WithKeyAttribute adds the mapped key to every metric.
func TestWithKeyAttribute(t *testing.T) {
	srv := redistest.Start(t)
	tm := newTelemetry(t)
	kind := func(key string) string { return "order" }
	c := padlock.New(srv.Client(), tm.instrument(padlockotel.WithKeyAttribute(kind)))
	defer c.Close()
	l, err := c.TryAcquire(t.Context(), "lock:order:42", time.Second)
	require.NoError(t, err)
	order := attribute.String("padlock.key", "order")
	assert.Equal(t, int64(1), tm.sum(t, "padlock.held", order))
	require.NoError(t, l.Release(t.Context()))
	assert.Equal(t, uint64(1), tm.histogram(t, "padlock.acquire.duration", order, outcome("acquired")).Count)
	assert.Equal(t, uint64(1), tm.histogram(t, "padlock.hold.duration", order).Count)
	assert.Zero(t, tm.sum(t, "padlock.held", order))
}

// Every kind of Client reports: a Cluster, a Redlock, and a multi-key lock.
func TestEveryKindOfClient(t *testing.T) {
	tm := newTelemetry(t)
	var nodes []redis.UniversalClient
	for range 3 {
		nodes = append(nodes, redistest.Start(t).Client())
	}
	cluster := redistest.StartCluster(t)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{cluster.Addr()}})
	defer cc.Close()

	// Minute-long ttls and a deadline: a Release on a loaded machine's
	// Cluster may take longer than its 2s default, and a Redlock gives each
	// node a tenth of the ttl.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cycle := func(l *padlock.Lock, err error) {
		t.Helper()
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	}
	cc1 := padlock.New(cc, tm.instrument())
	defer cc1.Close()
	cycle(cc1.TryAcquire(ctx, "lock:c", time.Minute))
	rl := padlock.NewRedlock(nodes, tm.instrument())
	defer rl.Close()
	cycle(rl.TryAcquire(ctx, "lock:r", time.Minute))
	cycle(padlock.New(nodes[0], tm.instrument()).TryAcquireMany(ctx, []string{"lock:{m}:1", "lock:{m}:2"}, time.Minute))
	sem := padlock.New(nodes[1], tm.instrument())
	cycle(sem.TryAcquire(ctx, "lock:s", time.Minute, padlock.WithLimit(2)))

	assert.Equal(t, uint64(4), tm.histogram(t, "padlock.acquire.duration", outcome("acquired")).Count)
	assert.Equal(t, uint64(4), tm.histogram(t, "padlock.hold.duration").Count)
	assert.Zero(t, tm.sum(t, "padlock.held"))
	var released int
	for _, s := range tm.spans.Ended() {
		if s.Name() == "padlock.release" {
			released++
		}
	}
	assert.Equal(t, 4, released)
}
