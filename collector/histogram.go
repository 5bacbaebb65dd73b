package collector

// The native-histogram options of every histogram (veil_api_request_duration_seconds,
// veil_task_duration_seconds): client_golang keeps their native buckets beside the classic ones.

import "time"

const (
	// nativeBucketFactor is NativeHistogramBucketFactor of every histogram: each native bucket
	// is at most 1.1 times as wide as the previous one (client_golang picks schema 3, 2^(1/8)).
	nativeBucketFactor = 1.1
	// nativeMaxBuckets bounds the native buckets of one series; past it the resolution is
	// halved (the schema lowered by one) until it fits.
	nativeMaxBuckets = 100
	// nativeMinResetDuration: an API histogram over nativeMaxBuckets is reset rather than made
	// coarser if it has not been reset for this long (the task histogram is never reset: it
	// counts since the exporter started).
	nativeMinResetDuration = time.Hour
)
