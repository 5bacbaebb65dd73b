// Package collector turns a platform controller's inventory into Prometheus metrics.
//
// Collection runs in the background (Inventory.Run); a scrape only turns the latest snapshot
// into const metrics, so /metrics never calls the platform API and deleted objects disappear
// by themselves at the next refresh.
package collector

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const namespace = "veil"

// The veil_collector_* families are shared by the inventory, the guest checker and the
// forwarder; one set of Descs keeps their HELP identical, which the registry requires.
var (
	collectorSuccessDesc = prometheus.NewDesc("veil_collector_success",
		"1 if the last background run of the collector succeeded (inventory collections every collect.interval, guest sweeps, event polls); a scrape reads the cached result and never runs a collector.",
		[]string{"controller", "collector"}, nil)
	collectorDurationDesc = prometheus.NewDesc("veil_collector_duration_seconds",
		"Duration of the last background run of the collector; cached, a scrape never runs a collector.",
		[]string{"controller", "collector"}, nil)
	collectorLastSuccessDesc = prometheus.NewDesc("veil_collector_last_success_timestamp_seconds",
		"Unix time of the last successful background run of the collector, so time() minus it is the age of the cached data; 0 if it never succeeded.",
		[]string{"controller", "collector"}, nil)
)

// CollectorStatusMetrics sends veil_collector_success, veil_collector_duration_seconds and
// veil_collector_last_success_timestamp_seconds for one collector (e.g. "guest", "events").
// Use it instead of declaring these families again: the registry rejects two HELP texts.
func CollectorStatusMetrics(ch chan<- prometheus.Metric, controller, name string, success bool, duration time.Duration, lastSuccess time.Time) {
	ch <- prometheus.MustNewConstMetric(collectorSuccessDesc, prometheus.GaugeValue, boolFloat(success), controller, name)
	ch <- prometheus.MustNewConstMetric(collectorDurationDesc, prometheus.GaugeValue, duration.Seconds(), controller, name)
	ch <- prometheus.MustNewConstMetric(collectorLastSuccessDesc, prometheus.GaugeValue, unixSeconds(lastSuccess), controller, name)
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func unixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}

// APIMetrics counts the requests a controller's client makes: veil_api_requests_total and
// veil_api_request_duration_seconds. Pass its Observe as veil.Config.Observer.
type APIMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewAPIMetrics returns the API request metrics of one controller.
func NewAPIMetrics(controller string) *APIMetrics {
	cl := prometheus.Labels{"controller": controller}
	return &APIMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "api_requests_total", ConstLabels: cl,
			Help: "Requests sent to the platform API by endpoint template and HTTP status (0: no response).",
		}, []string{"endpoint", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "api_request_duration_seconds", ConstLabels: cl,
			Help:    "Duration of requests to the platform API by endpoint template.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
			// Native buckets beside the classic ones: a protobuf scrape gets both.
			NativeHistogramBucketFactor:     nativeBucketFactor,
			NativeHistogramMaxBucketNumber:  nativeMaxBuckets,
			NativeHistogramMinResetDuration: nativeMinResetDuration,
		}, []string{"endpoint"}),
	}
}

// Observe has the signature of veil.Observer.
func (m *APIMetrics) Observe(endpoint string, code int, d time.Duration) {
	m.requests.WithLabelValues(endpoint, codeLabel(code)).Inc()
	m.duration.WithLabelValues(endpoint).Observe(d.Seconds())
}

func codeLabel(code int) string {
	if code == 200 {
		return "200" // the common case, without an allocation
	}
	return strconv.Itoa(code)
}

func (m *APIMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.requests.Describe(ch)
	m.duration.Describe(ch)
}

func (m *APIMetrics) Collect(ch chan<- prometheus.Metric) {
	m.requests.Collect(ch)
	m.duration.Collect(ch)
}
