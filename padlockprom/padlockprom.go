// Package padlockprom reports what padlock's locks do as Prometheus
// metrics: the measures of padlockotel, on
// github.com/prometheus/client_golang, for a service that has a Prometheus
// registry and no OpenTelemetry.
//
//	metrics := padlockprom.New()
//	prometheus.MustRegister(metrics)                // or your own registry
//	locks := padlock.New(rdb, metrics.Instrument()) // one Collector, any number of Clients
//
// Metrics:
//
//	padlock_acquire_duration_seconds  histogram: one observation per TryAcquire, Acquire,
//	                                  TryAcquireMany or AcquireMany call (also inside TryDo and Do),
//	                                  waits included, with padlock_outcome = acquired | not_acquired | error
//	padlock_hold_duration_seconds     histogram: from acquire to release or loss
//	padlock_held                      gauge: locks held now (acquired, not yet released or lost)
//	padlock_waiting                   gauge: Acquire calls waiting now
//	padlock_lost_total                counter: locks lost (a kept-alive lock found gone, or its deadline passed)
//	padlock_renewals_total            counter: renewals, with padlock_outcome = ok | failed
//
// These are the names and labels padlockotel's metrics get through the
// OpenTelemetry Prometheus exporter (less the labels the exporter adds of
// its own, such as otel_scope_name), so a dashboard or an alert written
// for one works with the other. The gauges count what this process's
// instrumented Clients were told (padlock.Observer's AcquireDone and
// HoldEnd, WaitStart and WaitDone), read at each scrape; they are not a
// census of Redis. A lock that is neither released nor kept alive (left to
// expire) counts in padlock_held until it is released.
//
// Buckets, in seconds: acquire .001 to 60 (.001, .0025, .005, .01, .025,
// .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60), hold .01 to 3600 (.01, .05,
// .1, .5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600).
//
// Keys are unbounded, so the metrics carry no key unless WithKeyLabel maps
// keys to a bounded set. To add labels of your own (a service, a
// region), register the Collector with prometheus.WrapRegistererWith.
package padlockprom

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/padlock-go/padlock"
)

// Label names.
const (
	outcomeLabel = "padlock_outcome"
	keyLabel     = "padlock_key"
)

var (
	acquireBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	holdBuckets    = []float64{.01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600}
)

// An Option configures New.
type Option interface {
	apply(*config)
}

type config struct {
	keyLabel func(string) string
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithKeyLabel adds the label padlock_key = f(key) to every metric. f must
// map the unbounded set of keys to a small, bounded one (a lock's kind,
// say: "lock:order:42" to "order"), or the metrics grow without bound: a
// series is kept for every value f returns. A nil f keeps the default, no
// key label.
func WithKeyLabel(f func(key string) string) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.keyLabel = f
		}
	})
}

// A Collector is a prometheus.Collector of the metrics in the package
// doc, fed by the padlock Clients (or calls) given its Instrument option.
// It is safe for concurrent use: any number of Clients may report to one
// Collector, and a scrape may run while they do.
type Collector struct {
	keyLabel   func(string) string
	acquireDur *prometheus.HistogramVec // by outcome (and key)
	holdDur    *prometheus.HistogramVec // (by key)
	lost       *prometheus.CounterVec   // (by key)
	renewals   *prometheus.CounterVec   // by outcome (and key)
	held       *prometheus.Desc
	waiting    *prometheus.Desc
	obs        *padlock.Observer

	mu  sync.Mutex
	now map[string]*current // by key label; "" without WithKeyLabel
}

// current is what a Collector's Clients hold and wait for now, under one
// key label.
type current struct {
	held, waiting int64
}

// New returns a Collector of padlock's metrics, all at zero. It does not
// register it (prometheus.MustRegister, or a registry's Register, does:
// registering two Collectors in one registry fails with
// prometheus.AlreadyRegisteredError), and starts no goroutine.
func New(opts ...Option) *Collector {
	var cfg config
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	var keyed []string
	if cfg.keyLabel != nil {
		keyed = []string{keyLabel}
	}
	withOutcome := append([]string{outcomeLabel}, keyed...)
	c := &Collector{
		keyLabel: cfg.keyLabel,
		acquireDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "padlock_acquire_duration_seconds",
			Help:    "Duration of padlock acquire calls, waits included, by outcome.",
			Buckets: acquireBuckets,
		}, withOutcome),
		holdDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "padlock_hold_duration_seconds",
			Help:    "How long padlock locks were held, from acquire to release or loss.",
			Buckets: holdBuckets,
		}, keyed),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "padlock_lost_total",
			Help: "Padlock locks lost while held.",
		}, keyed),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "padlock_renewals_total",
			Help: "Renewals of kept-alive padlock locks, by outcome.",
		}, withOutcome),
		held: prometheus.NewDesc("padlock_held",
			"Padlock locks this process holds now: acquired, not yet released or lost.", keyed, nil),
		waiting: prometheus.NewDesc("padlock_waiting",
			"Padlock Acquire calls of this process waiting now for a lock held elsewhere.", keyed, nil),
		now: make(map[string]*current),
	}
	if c.keyLabel == nil {
		// One series of each from the start, at zero, so that rate() and
		// alerts see the first event.
		for _, o := range []string{"acquired", "not_acquired", "error"} {
			c.acquireDur.WithLabelValues(o)
		}
		c.holdDur.WithLabelValues()
		c.lost.WithLabelValues()
		c.renewals.WithLabelValues("ok")
		c.renewals.WithLabelValues("failed")
		c.now[""] = &current{}
	}
	c.obs = c.observer()
	return c
}

// Instrument returns a padlock Option that reports to c what the Client
// it is passed to (padlock.New, NewRedlock, an adapter's New) or one call
// does, through a padlock.Observer. It may be given to any number of
// Clients: their metrics add up. It cannot fail. Reporting costs a call a
// few map lookups and additions, and never blocks on Redis or the network;
// a call that adds a series (a key label not seen before) waits for a
// scrape in progress to end.
func (c *Collector) Instrument() padlock.Option {
	return padlock.WithObserver(c.obs)
}

// Describe sends the descriptors of c's metrics to ch (prometheus.Collector).
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.acquireDur.Describe(ch)
	c.holdDur.Describe(ch)
	c.lost.Describe(ch)
	c.renewals.Describe(ch)
	ch <- c.held
	ch <- c.waiting
}

// Collect sends c's metrics to ch (prometheus.Collector), the gauges with
// their values now. It blocks while ch is not read; the padlock calls
// that report to c wait for it only to add a series (see Instrument).
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.acquireDur.Collect(ch)
	c.holdDur.Collect(ch)
	c.lost.Collect(ch)
	c.renewals.Collect(ch)
	c.mu.Lock()
	gauges := make([]prometheus.Metric, 0, 2*len(c.now))
	for k, n := range c.now {
		labels := c.labels(k)
		gauges = append(gauges,
			prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(n.held), labels...),
			prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(n.waiting), labels...))
	}
	c.mu.Unlock()
	for _, m := range gauges {
		ch <- m
	}
}

// key returns the key label of key: "" without WithKeyLabel.
func (c *Collector) key(key string) string {
	if c.keyLabel == nil {
		return ""
	}
	return c.keyLabel(key)
}

// labels returns the label values of a metric: first the others given
// (the outcome, if the metric has one), then k if WithKeyLabel is set.
func (c *Collector) labels(k string, others ...string) []string {
	if c.keyLabel == nil {
		return others
	}
	return append(others, k)
}

// add adds held and waiting to the gauges of key label k.
func (c *Collector) add(k string, held, waiting int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.now[k]
	if n == nil {
		n = &current{}
		c.now[k] = n
	}
	n.held += held
	n.waiting += waiting
}

func (c *Collector) observer() *padlock.Observer {
	return &padlock.Observer{
		AcquireDone: func(_ context.Context, i padlock.AcquireDoneInfo) {
			k := c.key(i.Key)
			c.acquireDur.WithLabelValues(c.labels(k, i.Outcome())...).Observe(i.Duration.Seconds())
			if i.Err == nil {
				c.add(k, 1, 0)
			}
		},
		WaitStart: func(_ context.Context, key string) { c.add(c.key(key), 0, 1) },
		WaitDone:  func(_ context.Context, key string) { c.add(c.key(key), 0, -1) },
		Renewal: func(i padlock.RenewalInfo) {
			outcome := "ok"
			if i.Err != nil {
				outcome = "failed"
			}
			c.renewals.WithLabelValues(c.labels(c.key(i.Key), outcome)...).Inc()
		},
		HoldEnd: func(i padlock.HoldEndInfo) {
			k := c.key(i.Key)
			c.holdDur.WithLabelValues(c.labels(k)...).Observe(i.Held.Seconds())
			c.add(k, -1, 0)
			if i.Lost {
				c.lost.WithLabelValues(c.labels(k)...).Inc()
			}
		},
	}
}
