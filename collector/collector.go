package collector

// The API request metrics every controller's client reports (APIMetrics).

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const namespace = "veil"

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
