// Package chart packages the Helm chart in deploy/helm/veil-exporter reproducibly (Package) and,
// in its tests, proves the chart: every ci/*-values.yaml renders as its golden file into objects
// the Kubernetes API types accept, with a configuration the daemon accepts; the chart lints
// clean; a wrong value is refused naming its key; the default render is the kustomize base's
// Deployment, Service and ConfigMap; the rules and dashboards are the repository's.
//
// It is a Go module of its own, so that Helm's and Kubernetes' modules stay out of the daemon's
// go.mod.
package chart
