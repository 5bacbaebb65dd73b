package collector

// The API request metrics every controller's client reports (APIMetrics), and the objects it
// rejected.

import (
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/veil-exporter/veil-exporter/veil"
)

const namespace = "veil"

// APIMetrics counts the requests a controller's client makes: veil_api_requests_total and
// veil_api_request_duration_seconds. Pass its Observe as veil.Config.Observer, and its Rejected
// as veil.Config.Rejected: veil_objects_rejected_total, and one warning per rejected object.
type APIMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	rejected *prometheus.CounterVec
	rejects  rejectLog
}

// NewAPIMetrics returns the API request metrics of one controller; logger (nil: none) says
// the objects rejected.
func NewAPIMetrics(controller string, logger log.Logger) *APIMetrics {
	cl := prometheus.Labels{"controller": controller}
	if logger == nil {
		logger = log.NewNopLogger()
	}
	return &APIMetrics{
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "objects_rejected_total", ConstLabels: cl,
			Help: "Objects the controller sent that were skipped, by collection (domains, nodes, vdisks..., push for a push frame naming none, a guest command such as guest-get-fsinfo) and reason: decode (not an object, malformed), type (a field of an unexpected type), missing_id, over_limit (past a listing's bound of 4 times its first count and a page, or a guest's devices past 64). The rest of the page and the collection are used; each object is logged once.",
		}, []string{"collection", "reason"}),
		rejects: rejectLog{logger: log.With(logger, "controller", controller)},
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

// Rejected has the signature of veil.RejectFunc: it counts r and logs it once per object.
func (m *APIMetrics) Rejected(r veil.Rejection) {
	m.rejected.WithLabelValues(r.Collection, r.Reason).Add(float64(max(r.Count, 1)))
	m.rejects.say(r)
}

func (m *APIMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.requests.Describe(ch)
	m.duration.Describe(ch)
	m.rejected.Describe(ch)
}

func (m *APIMetrics) Collect(ch chan<- prometheus.Metric) {
	m.requests.Collect(ch)
	m.duration.Collect(ch)
	m.rejected.Collect(ch)
}

// maxRejectsSaid bounds the objects whose rejection is remembered as said: past it, one line
// says that further ones are only counted.
const maxRejectsSaid = 10000

// maxLogText bounds the texts from the controller a rejection's log line carries.
const maxLogText = 200

// rejectLog says each rejected object once: an object rejected at every refresh is logged at
// its first, not every collect.interval.
type rejectLog struct {
	logger log.Logger
	mu     sync.Mutex
	said   map[[3]string]struct{} // collection, id, field (and reason for those without an id)
	full   bool
}

func (l *rejectLog) say(r veil.Rejection) {
	key := [3]string{r.Collection, r.ID, r.Field}
	if r.ID == "" {
		key[1] = "reason:" + r.Reason
	}
	l.mu.Lock()
	_, said := l.said[key]
	full := !said && len(l.said) >= maxRejectsSaid
	first := full && !l.full
	switch {
	case said:
	case full:
		l.full = true
	default:
		if l.said == nil {
			l.said = make(map[[3]string]struct{})
		}
		l.said[key] = struct{}{}
	}
	l.mu.Unlock()
	switch {
	case first:
		level.Warn(l.logger).Log("msg", "too many objects rejected to say each: further ones are only counted in veil_objects_rejected_total", "said", maxRejectsSaid)
	case !said && !full:
		kv := []any{"msg", "object skipped: it does not decode or lies beyond a bound; the rest of its collection is used", "collection", r.Collection, "reason", r.Reason}
		if r.ID != "" {
			kv = append(kv, "id", capText(r.ID))
		}
		if r.Field != "" {
			kv = append(kv, "field", capText(r.Field))
		}
		if r.Count > 1 {
			kv = append(kv, "objects", r.Count)
		}
		if r.Err != nil {
			kv = append(kv, "err", capText(r.Err.Error()))
		}
		level.Warn(l.logger).Log(kv...)
	}
}

// capText cuts a text from the controller to maxLogText bytes (at a rune boundary).
func capText(s string) string {
	if len(s) <= maxLogText {
		return s
	}
	i := maxLogText
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
