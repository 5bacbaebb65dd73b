// Package exposition renders metric families once and serves them on every scrape beside the
// families that stay live, in the text format, OpenMetrics 1.0 and delimited protobuf.
//
// It owns the rendered form (Desc, Builder, Set, Cache), its compression, its other formats
// and the /metrics handler's paths for all three; it imports only client_golang, client_model,
// prometheus/common, protobuf and klauspost/compress. Collectors build a Set when their data
// changes; a scrape copies bytes.
package exposition
