// Package web is veil-exporter's HTTP side: /metrics (the controllers' rendered sets written as
// they are, the exporter's own families encoded live), the status page on / and its JSON,
// Prometheus HTTP service discovery on /sd/domains, and /-/healthy, /-/ready and /-/reload.
//
// It owns the endpoints' bounds (write deadlines, parallel scrapes, SD request limits), their
// view types and what they never show (secrets, texts over 512 bytes). It reads the supervisor
// only through Source, which internal/daemon satisfies, and never waits on a controller.
//
// It may import internal/exposition, internal/runstatus and the packages whose status it shows
// (collector, changefeed, forwarder, ha, natsconn, config); it must not import internal/daemon,
// which imports it.
package web
