// Package chart packages the Helm chart in deploy/helm/veil-exporter reproducibly (Package) and,
// in its tests, proves the chart: every ci/*-values.yaml renders as its golden file into objects
// the Kubernetes API types accept; the chart lints clean; a wrong value is refused naming its
// key; the default render is the kustomize base's Deployment, Service and ConfigMap; the rules
// and dashboards are the repository's.
//
// It is a Go module of its own, so that Helm's and Kubernetes' modules stay out of the daemon's
// go.mod; it needs none of the daemon's packages. What needs them is in the daemon's module:
// deploy/helm_test.go parses the configuration of every golden render with the daemon's config
// package, and derives values.schema.json's config and controllers parts from its types.
package chart
