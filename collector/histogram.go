package collector

// This file holds the native-histogram side of the histograms: the options of the live ones
// (client_golang keeps their buckets) and the buckets of veil_task_duration_seconds, which is
// built at each scrape from counts the task tracker keeps, classic and native in one series.

import (
	"math"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

const (
	// nativeBucketFactor is NativeHistogramBucketFactor of every histogram: each native bucket
	// is at most 1.1 times as wide as the previous one (client_golang picks schema 3, 2^(1/8)).
	nativeBucketFactor = 1.1
	// nativeSchema is the schema client_golang picks for nativeBucketFactor; the task tracker
	// counts in it.
	nativeSchema = 3
	// nativeMaxBuckets bounds the native buckets of one series; past it the resolution is
	// halved (the schema lowered by one) until it fits.
	nativeMaxBuckets = 100
	// nativeMinResetDuration: a live histogram over nativeMaxBuckets is reset rather than made
	// coarser if it has not been reset for this long.
	nativeMinResetDuration = time.Hour
)

// nativeBounds are the upper bounds, as fractions of a power of two, of the nativeSchema
// buckets within one doubling: 2^(i/8 - 1) for i in 0..7, as in client_golang.
var nativeBounds = func() []float64 {
	n := 1 << nativeSchema
	b := make([]float64, n)
	for i := range b {
		b[i] = math.Exp2(float64(i)/float64(n) - 1)
	}
	return b
}()

// nativeKey is the index of the nativeSchema bucket of v > 0: the bucket covers
// (2^((key-1)/8), 2^(key/8)].
func nativeKey(v float64) int {
	frac, exp := math.Frexp(v)
	return sort.SearchFloat64s(nativeBounds, frac) + (exp-1)*len(nativeBounds)
}

// coarsen lowers the schema of buckets until at most maxBuckets remain: each step merges the
// buckets 2k-1 and 2k of a schema into the bucket k of the schema below.
func coarsen(buckets map[int]uint64, schema int32, maxBuckets int) (map[int]int64, int32) {
	out := make(map[int]int64, len(buckets))
	for k, n := range buckets {
		out[k] = int64(n)
	}
	for len(out) > maxBuckets && schema > -4 {
		merged := make(map[int]int64, len(out)/2+1)
		for k, n := range out {
			merged[(k+1)>>1] += n // ceil(k/2), also for negative k
		}
		out, schema = merged, schema-1
	}
	return out, schema
}

// bothHistogram is a const histogram with classic buckets and native buckets in one series:
// the text format shows the classic ones, a protobuf scrape both.
type bothHistogram struct {
	prometheus.Metric // the native histogram
	classic           []*dto.Bucket
}

func (h bothHistogram) Write(out *dto.Metric) error {
	if err := h.Metric.Write(out); err != nil {
		return err
	}
	out.Histogram.Bucket = h.classic
	return nil
}

// newBothHistogram returns the histogram of count observations summing to sum, with the
// cumulative classic buckets (upper bound -> count) and the native ones of nativeSchema
// (bucket index -> count, zero: observations at or below the zero threshold).
func newBothHistogram(desc *prometheus.Desc, count uint64, sum float64, classic map[float64]uint64,
	native map[int]uint64, zero uint64, created time.Time, labelValues ...string) (prometheus.Metric, error) {
	pos, schema := coarsen(native, nativeSchema, nativeMaxBuckets)
	m, err := prometheus.NewConstNativeHistogram(desc, count, sum, pos, nil, zero, schema,
		prometheus.DefNativeHistogramZeroThreshold, created, labelValues...)
	if err != nil {
		return nil, err
	}
	bounds := make([]float64, 0, len(classic))
	for ub := range classic {
		bounds = append(bounds, ub)
	}
	sort.Float64s(bounds)
	b := make([]*dto.Bucket, len(bounds))
	for i, ub := range bounds {
		b[i] = &dto.Bucket{UpperBound: new(ub), CumulativeCount: new(classic[ub])}
	}
	return bothHistogram{m, b}, nil
}
