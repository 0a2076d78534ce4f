// Package padlockotel reports what padlock's locks do as OpenTelemetry
// metrics and spans:
//
//	locks := padlock.New(rdb, padlockotel.Instrument(
//		padlockotel.WithMeterProvider(mp), // default: the global providers
//		padlockotel.WithTracerProvider(tp),
//	))
//
// Metrics (instrumentation scope github.com/padlock-go/padlock/padlockotel):
//
//	padlock.acquire.duration  float64 histogram, s: one record per TryAcquire, Acquire,
//	                          TryAcquireMany or AcquireMany call (also inside TryDo and Do),
//	                          with padlock.outcome = acquired | not_acquired | error
//	padlock.hold.duration     float64 histogram, s: from acquire to release or loss
//	padlock.held              int64 up-down counter: locks held now (acquired, not yet released or lost)
//	padlock.waiting           int64 up-down counter: Acquire calls waiting now
//	padlock.lost              int64 counter: locks lost (a kept-alive lock found gone, or its deadline passed)
//	padlock.renewals          int64 counter: renewals, with padlock.outcome = ok | failed
//
// Keys are unbounded, so metrics carry no key unless WithKeyAttribute maps
// keys to a bounded set. A lock that is neither released nor kept alive
// (left to expire) counts in padlock.held until it is released.
//
// Spans: padlock.acquire (attributes padlock.key, padlock.outcome,
// padlock.fence when fenced, padlock.acquire.wait: the call's duration in
// seconds) and padlock.release (padlock.key, padlock.outcome = released |
// not_held | error), children of the span in the caller's context; an
// error is recorded on the span and sets its status (contention and
// "not held" are not errors). Renewals make no span.
package padlockotel

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/padlock-go/padlock"
)

// ScopeName is the instrumentation scope of padlock's meter and tracer.
const ScopeName = "github.com/padlock-go/padlock/padlockotel"

// An Option configures Instrument.
type Option interface {
	apply(*config)
}

type config struct {
	mp      metric.MeterProvider
	tp      trace.TracerProvider
	keyAttr func(string) string
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithMeterProvider sets the MeterProvider (default: otel.GetMeterProvider
// when Instrument is called). A nil mp keeps the default.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) {
		if mp != nil {
			c.mp = mp
		}
	})
}

// WithTracerProvider sets the TracerProvider (default:
// otel.GetTracerProvider when Instrument is called). A nil tp keeps the
// default.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) {
		if tp != nil {
			c.tp = tp
		}
	})
}

// WithKeyAttribute adds the attribute padlock.key = f(key) to every metric.
// f must map the unbounded set of keys to a small, bounded one (a lock's
// kind, say: "lock:order:42" to "order"), or the metrics grow without
// bound. Spans always carry the key itself.
func WithKeyAttribute(f func(key string) string) Option {
	return optionFunc(func(c *config) { c.keyAttr = f })
}

// Attribute keys.
const (
	keyAttr     = attribute.Key("padlock.key")
	outcomeAttr = attribute.Key("padlock.outcome")
	fenceAttr   = attribute.Key("padlock.fence")
	waitAttr    = attribute.Key("padlock.acquire.wait")
)

// instruments are the metric instruments and the tracer of one Instrument
// call.
type instruments struct {
	cfg                    config
	tracer                 trace.Tracer
	acquireDur, holdDur    metric.Float64Histogram
	held, waiting          metric.Int64UpDownCounter
	lost, renewals         metric.Int64Counter
	outcomes               map[string]metric.MeasurementOption // by outcome, without a key
	renewalOK, renewalFail metric.MeasurementOption
	noAttrs                metric.MeasurementOption
}

// Instrument returns a padlock Option that reports the Client's (or one
// call's) locks as the metrics and spans listed in the package doc. It
// creates the instruments once, when called; an error creating one is
// passed to otel.Handle, and that instrument records nothing.
func Instrument(opts ...Option) padlock.Option {
	cfg := config{mp: otel.GetMeterProvider(), tp: otel.GetTracerProvider()}
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	in := &instruments{cfg: cfg, tracer: cfg.tp.Tracer(ScopeName)}
	meter := cfg.mp.Meter(ScopeName)
	var err error
	var errs []error
	in.acquireDur, err = meter.Float64Histogram("padlock.acquire.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of acquire calls, waits included, by outcome."))
	errs = append(errs, err)
	in.holdDur, err = meter.Float64Histogram("padlock.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("How long locks were held, from acquire to release or loss."))
	errs = append(errs, err)
	in.held, err = meter.Int64UpDownCounter("padlock.held", metric.WithUnit("{lock}"),
		metric.WithDescription("Locks held now: acquired, not yet released or lost."))
	errs = append(errs, err)
	in.waiting, err = meter.Int64UpDownCounter("padlock.waiting", metric.WithUnit("{call}"),
		metric.WithDescription("Acquire calls waiting now for a lock held elsewhere."))
	errs = append(errs, err)
	in.lost, err = meter.Int64Counter("padlock.lost", metric.WithUnit("{lock}"),
		metric.WithDescription("Locks lost while held."))
	errs = append(errs, err)
	in.renewals, err = meter.Int64Counter("padlock.renewals", metric.WithUnit("{renewal}"),
		metric.WithDescription("Renewals of kept-alive locks, by outcome."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		otel.Handle(err)
	}
	in.outcomes = make(map[string]metric.MeasurementOption)
	for _, o := range []string{"acquired", "not_acquired", "error"} {
		in.outcomes[o] = metric.WithAttributeSet(attribute.NewSet(outcomeAttr.String(o)))
	}
	in.renewalOK = metric.WithAttributeSet(attribute.NewSet(outcomeAttr.String("ok")))
	in.renewalFail = metric.WithAttributeSet(attribute.NewSet(outcomeAttr.String("failed")))
	in.noAttrs = metric.WithAttributeSet(*attribute.EmptySet())
	return padlock.WithObserver(in.observer())
}

// attrs returns the measurement attributes for key: the outcome, if any,
// and the mapped key, if WithKeyAttribute is set.
func (in *instruments) attrs(key, outcome string, preset metric.MeasurementOption) metric.MeasurementOption {
	if in.cfg.keyAttr == nil {
		return preset
	}
	kv := []attribute.KeyValue{keyAttr.String(in.cfg.keyAttr(key))}
	if outcome != "" {
		kv = append(kv, outcomeAttr.String(outcome))
	}
	return metric.WithAttributeSet(attribute.NewSet(kv...))
}

// spanKey holds padlock's own span in the context between the start and
// the end of an acquire or release.
type spanKey struct{}

func (in *instruments) start(ctx context.Context, name, key string) context.Context {
	ctx, span := in.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(keyAttr.String(key)))
	return context.WithValue(ctx, spanKey{}, span)
}

func spanOf(ctx context.Context) trace.Span {
	if s, ok := ctx.Value(spanKey{}).(trace.Span); ok {
		return s
	}
	return nil
}

func (in *instruments) observer() *padlock.Observer {
	return &padlock.Observer{
		AcquireStart: func(ctx context.Context, i padlock.AcquireStartInfo) context.Context {
			return in.start(ctx, "padlock.acquire", i.Key)
		},
		AcquireDone: func(ctx context.Context, i padlock.AcquireDoneInfo) {
			outcome := i.Outcome()
			in.acquireDur.Record(ctx, i.Duration.Seconds(), in.attrs(i.Key, outcome, in.outcomes[outcome]))
			if i.Err == nil {
				in.held.Add(ctx, 1, in.attrs(i.Key, "", in.noAttrs))
			}
			span := spanOf(ctx)
			if span == nil {
				return
			}
			span.SetAttributes(outcomeAttr.String(outcome), waitAttr.Float64(i.Duration.Seconds()))
			if i.Fence > 0 {
				span.SetAttributes(fenceAttr.Int64(i.Fence))
			}
			if outcome == "error" {
				span.RecordError(i.Err)
				span.SetStatus(codes.Error, i.Err.Error())
			}
			span.End()
		},
		WaitStart: func(ctx context.Context, key string) {
			in.waiting.Add(ctx, 1, in.attrs(key, "", in.noAttrs))
		},
		WaitDone: func(ctx context.Context, key string) {
			in.waiting.Add(ctx, -1, in.attrs(key, "", in.noAttrs))
		},
		ReleaseStart: func(ctx context.Context, key string) context.Context {
			return in.start(ctx, "padlock.release", key)
		},
		ReleaseDone: func(ctx context.Context, i padlock.ReleaseDoneInfo) {
			span := spanOf(ctx)
			if span == nil {
				return
			}
			switch {
			case i.Err == nil:
				span.SetAttributes(outcomeAttr.String("released"))
			case errors.Is(i.Err, padlock.ErrNotHeld):
				span.SetAttributes(outcomeAttr.String("not_held"))
			default:
				span.SetAttributes(outcomeAttr.String("error"))
				span.RecordError(i.Err)
				span.SetStatus(codes.Error, i.Err.Error())
			}
			span.End()
		},
		Renewal: func(i padlock.RenewalInfo) {
			opt := in.renewalOK
			outcome := "ok"
			if i.Err != nil {
				opt, outcome = in.renewalFail, "failed"
			}
			in.renewals.Add(context.Background(), 1, in.attrs(i.Key, outcome, opt))
		},
		HoldEnd: func(i padlock.HoldEndInfo) {
			ctx := context.Background()
			attrs := in.attrs(i.Key, "", in.noAttrs)
			in.holdDur.Record(ctx, i.Held.Seconds(), attrs)
			in.held.Add(ctx, -1, attrs)
			if i.Lost {
				in.lost.Add(ctx, 1, attrs)
			}
		},
	}
}
