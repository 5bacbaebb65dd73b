// Package exposition renders metric families once and serves them on every scrape beside the
// families that stay live, in the text format, OpenMetrics 1.0 and delimited protobuf.
//
// It owns the rendered form (Desc, Builder, Set, Cache), its compression, its other formats
// and the /metrics handler's paths for all three; it imports only client_golang, client_model,
// prometheus/common, protobuf and klauspost/compress. A collector writes one emit function
// against a Sink, which a Builder renders (Cache: Invalidate after a change, Run renders) and
// Live sends to client_golang as the metrics NewConstMetric would make (live.go); a scrape
// copies the rendered bytes. A Set holds what its collector rendered it from (Set.Source,
// Sink.Rendering): the render state the next emit keeps or patches against (Sink.Previous).
package exposition
