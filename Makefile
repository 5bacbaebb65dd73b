# veil-exporter — build, test, demo, bench, lint.
GO        ?= go
BIN       := bin
# The version is the VERSION file's (no tag needed); VERSION=... overrides it.
VERSION   ?= $(shell cat VERSION 2>/dev/null || echo dev)
REVISION  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
BRANCH    ?= $(shell git rev-parse --abbrev-ref HEAD 2>/dev/null || echo unknown)
BUILD_USER ?= $(shell whoami 2>/dev/null || echo unknown)@$(shell hostname 2>/dev/null || echo unknown)
BUILD_DATE ?= $(shell date -u +%Y%m%d-%H:%M:%S)
# Stamped as every Prometheus exporter: --version and veil_exporter_build_info read them.
VERSION_PKG := github.com/prometheus/common/version
LDFLAGS   := -s -w -X $(VERSION_PKG).Version=$(VERSION) -X $(VERSION_PKG).Revision=$(REVISION) \
             -X $(VERSION_PKG).Branch=$(BRANCH) -X $(VERSION_PKG).BuildUser=$(BUILD_USER) \
             -X $(VERSION_PKG).BuildDate=$(BUILD_DATE)
PKGS      := ./...

.PHONY: notice notice-test release release-chart release-test upgrade-test
.PHONY: all build image test test-deps test-stress vet race fuzz-seed rules-test docs fuzz property faults demo demo-ha bench bench-fleet bench-reference lint clean

.PHONY: chart chart-test

all: build

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/veil-exporter ./cmd/veil-exporter
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/veil-sim ./cmd/veil-sim

## image: the container image (deploy/Dockerfile, FROM scratch) around a static binary stamped as
## in build, with podman or docker, whichever is installed (CONTAINER_ENGINE=... to choose). The
## build context is IMAGE_DIR: the binary, the CA bundle, passwd/group with the user 65532, the
## example config and the state directory.
IMAGE            ?= veil-exporter:$(VERSION)
IMAGE_DIR        ?= $(BIN)/image
CONTAINER_ENGINE ?= $(shell command -v podman 2>/dev/null || command -v docker 2>/dev/null)
CA_BUNDLE        ?= /etc/ssl/certs/ca-certificates.crt
image:
	@test -n "$(CONTAINER_ENGINE)" || { echo "make image needs podman or docker (Debian: apt-get install podman)" >&2; exit 1; }
	rm -rf $(IMAGE_DIR) && mkdir -p $(IMAGE_DIR)/state
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(IMAGE_DIR)/veil-exporter ./cmd/veil-exporter
	cp $(CA_BUNDLE) $(IMAGE_DIR)/ca-certificates.crt
	cp config.example.yaml $(IMAGE_DIR)/config.yaml
	printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >$(IMAGE_DIR)/passwd
	printf 'root:x:0:\nnonroot:x:65532:\n' >$(IMAGE_DIR)/group
	$(CONTAINER_ENGINE) build -f deploy/Dockerfile -t $(IMAGE) $(IMAGE_DIR)

## test: everything CI runs: vet, unit + integration + end-to-end tests with the race
## detector (fuzz targets run their seed corpora as ordinary tests), alert-rule unit tests.
## It first installs what the tests need (test-deps), so a fresh machine with Go runs it.
test: test-deps
	$(MAKE) vet race rules-test notice-test chart-test

## test-deps: promtool and prometheus (alert-rule tests, end-to-end test), chromium (status page
## in the end-to-end test), podman and runc (the image test, e2e/image_test.go), and every module
## incl. tools (so `make lint` then works offline).
## As root on Debian/Ubuntu it installs the missing packages; otherwise it stops and prints the
## command to run.
TEST_PKGS = $(shell command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 || echo prometheus) \
            $(shell command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || echo chromium) \
            $(shell command -v podman >/dev/null 2>&1 || echo podman) \
            $(shell command -v runc >/dev/null 2>&1 || echo runc)
test-deps:
	@set -e; pkgs="$(strip $(TEST_PKGS))"; \
	if [ -n "$$pkgs" ]; then \
	  cmd="apt-get update && apt-get install -y --no-install-recommends $$pkgs"; \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "make test: installing $$pkgs"; \
	    export DEBIAN_FRONTEND=noninteractive; apt-get update -qq; \
	    apt-get install -y -qq --no-install-recommends $$pkgs >/dev/null; \
	  else \
	    echo "make test needs the packages $$pkgs (promtool, prometheus, chromium, podman, runc). Install them, then run make test again:" >&2; \
	    echo "  sudo sh -c '$$cmd'" >&2; \
	    exit 1; \
	  fi; \
	fi
	$(GO) mod download
	cd tools/chart && $(GO) mod download

## vet also reads the files of the targets' build tags (release-test, upgrade-test, pprof): a
## change that breaks one of them fails make test, not the release.
VET_TAGS ?= releasetest upgrade pprof
vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet -tags '$(VET_TAGS)' $(PKGS)

## race: every package's tests with the race detector, four packages at once: most of their
## time is spent waiting on real processes, NATS and timers (two at once kept 2 cores 55 % busy),
## so four halve the wall time; the tests assert what the configured times guarantee, not speed.
race:
	$(GO) test -race -count=1 -p 4 -timeout 13m $(PKGS)

rules-test:
	bash deploy/prometheus/test.sh

## chart: the Helm chart (deploy/helm/veil-exporter) packaged as dist/veil-exporter-<version>.tgz
## with the Helm library, the same bytes for one commit: every entry is dated SOURCE_DATE_EPOCH,
## by default the time of the last commit (tools/chart/cmd/package). DIST=... writes elsewhere.
chart:
	cd tools/chart && SOURCE_DATE_EPOCH=$${SOURCE_DATE_EPOCH:-$$(git log -1 --format=%ct 2>/dev/null || echo 0)} \
	  $(GO) run ./cmd/package -chart $(abspath deploy/helm/veil-exporter) -out $(abspath $(or $(DIST),dist))

## chart-test: the chart's tests (tools/chart, a Go module of its own): every ci/*-values.yaml
## rendered against its golden file and decoded strictly into the Kubernetes types, lint, wrong
## values refused, the kustomize base, the rules and dashboards (deploy/helm_test.go, in race,
## parses the renders' configurations with the daemon's parser). After changing the chart:
## cd tools/chart && go test ./... -update, then read the golden files' diff.
chart-test:
	$(GO) build -o $(BIN)/staticcheck honnef.co/go/tools/cmd/staticcheck
	cd tools/chart && $(GO) vet ./... && ../../$(BIN)/staticcheck ./... && $(GO) test -count=1 ./...

## test-stress: the packages whose tests wait on time (STRESS_PKGS, default ha guest forwarder
## internal/daemon e2e), built once with -race, run STRESS_N times (default 10) pinned to one CPU
## beside a busy loop on it; prints each test's failures out of N (scripts/test-stress.sh).
## STRESS_RUN narrows to a -test.run pattern; STRESS_RACE=0 builds without the race detector.
STRESS_PKGS ?= ha guest forwarder internal/daemon e2e
STRESS_N    ?= 10
test-stress:
	GO=$(GO) STRESS_PKGS="$(STRESS_PKGS)" STRESS_N=$(STRESS_N) bash scripts/test-stress.sh

## docs: regenerate docs/metrics.md from the families the exporter serves with every feature on
## (docs/metrics_test.go runs it against the simulator; `make test` fails when the file drifts).
docs:
	$(GO) test -count=1 -run '^TestMetrics$$' ./docs -update

## fuzz: a longer fuzzing run of every fuzz target of every package, one target at a time for
## FUZZTIME each (not part of `make test`, which runs their seed corpora); FUZZPARALLEL=1 fuzzes
## with one worker instead of one per CPU (scripts/fuzz.sh).
FUZZTIME     ?= 30s
FUZZPARALLEL ?=
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) FUZZPARALLEL=$(FUZZPARALLEL) bash scripts/fuzz.sh

## property: the forwarder's position as a property (forwarder/position_property_test.go) over
## PROPERTY_CASES random journals instead of make test's 200; a failure names the seed to replay.
PROPERTY_CASES ?= 20000
property:
	VEIL_PROPERTY_CASES=$(PROPERTY_CASES) $(GO) test -count=1 -v -timeout 60m -run '^TestEveryEventOnceWhateverTheJournalDoes$$' ./forwarder/

## faults: the durability suite (e2e/durability_test.go: kills, lost volumes and messages, lost
## acknowledgements, pauses, a full disk) with every row's rounds FAULTS_SCALE times as many as in
## `make test`, and the nemesis (e2e/nemesis_test.go: a seeded random schedule of composed faults
## on a 3-node NATS cluster, three replicas and six controllers) for NEMESIS_DURATION; prints the
## checkers' tables (journal ids ok / lost / duplicated / out of order). NEMESIS_SEED replays one.
## Then the data nemesis (e2e/data_nemesis_test.go: hostile events, clocks ahead, kill -9, NATS
## restarts) for DATA_NEMESIS_STEPS steps instead of make test's 30; DATA_NEMESIS_SEED replays one.
FAULTS_SCALE ?= 5
NEMESIS_DURATION ?= 30m
DATA_NEMESIS_STEPS ?= 300
faults:
	VEIL_FAULTS_SCALE=$(FAULTS_SCALE) VEIL_NEMESIS_DURATION=$(NEMESIS_DURATION) $(if $(NEMESIS_SEED),VEIL_NEMESIS_SEED=$(NEMESIS_SEED)) \
	  VEIL_DATA_NEMESIS_STEPS=$(DATA_NEMESIS_STEPS) $(if $(DATA_NEMESIS_SEED),VEIL_DATA_NEMESIS_SEED=$(DATA_NEMESIS_SEED)) \
	  $(GO) test -race -count=1 -v -timeout 120m -run '^(TestDurability|TestClassify|TestNemesis|TestDataNemesis)$$' ./e2e/

## demo: the simulator + the exporter with an embedded NATS server (+ Prometheus with the alert
## rules when installed); Ctrl-C stops them all.
demo: build
	bash scripts/demo.sh

## demo-ha: three replicas sharing three simulated controllers on a three-node NATS cluster
## (embedded, no nats-server needed); it prints how to kill one and watch the hand-over.
demo-ha: build
	bash scripts/demo-ha.sh

## bench: every performance goal as a ratio to its floor measured in the same run; the results
## go to bench/out/ (ignored). bench-reference makes the last run the committed reference.
bench:
	bash scripts/bench.sh

## bench-fleet: the large fleet (500 controllers, ten replicas, a three-node NATS cluster; about
## ten minutes), apart from bench; its figures join bench/out/results.json.
bench-fleet:
	bash scripts/bench-fleet.sh

bench-reference:
	@test -f bench/out/results.json || { echo "no bench/out/results.json: run make bench first" >&2; exit 1; }
	cp bench/out/results.json bench/results.json
	@echo "bench/results.json is now the reference run; commit it on purpose"

## lint: gofmt, vet and staticcheck (pinned by the tool directive in go.mod; offline once the
## modules are downloaded, as make test does).
lint: vet
	$(GO) tool staticcheck $(PKGS)

clean:
	rm -rf $(BIN) bench/out dist

## notice: regenerate NOTICE, the licenses of the modules bin/veil-exporter links (tools/notice);
## notice-test (part of make test) fails when NOTICE differs from what it would write.
notice:
	cd tools && $(GO) run ./cmd/notice -root ..
notice-test:
	cd tools && $(GO) test -count=1 ./notice/

## release: dist/ (DIST=...) for the commit RELEASE_REV (default HEAD; its files as committed, not the work tree's):
## veil-exporter-$(VERSION).linux-{amd64,arm64}.tar.gz, .deb and .rpm of each, the OCI image
## archive of both architectures (veil-exporter-$(VERSION).oci.tar), a CycloneDX SBOM per binary,
## then release-chart, then sha256sums.txt (+ .asc with GPG_KEY=<gpg key id>). Reproducible:
## two runs for one commit give the same bytes (tools/release, its own Go module).
GPG_KEY ?=
DIST    ?= dist
RELEASE_REV ?= HEAD
release:
	cd tools && $(GO) run ./cmd/release -root .. -rev $(RELEASE_REV) -out $(abspath $(DIST))
	$(MAKE) release-chart DIST=$(abspath $(DIST))
	cd tools && $(GO) run ./cmd/release -sums-only -out $(abspath $(DIST)) $(if $(GPG_KEY),-gpg-key $(GPG_KEY))

## release-chart: the Helm chart packaged into dist/ (veil-exporter-$(VERSION).tgz, make chart:
## the chart directory as it is in the work tree, its times the last commit's).
release-chart:
	$(MAKE) chart DIST=$(DIST)

## release-test: proves dist/ by installing and running it, offline (tools/releasetest): two
## releases of one commit give the same sha256sums.txt; the tarball, the .deb in a Debian
## container (rootfs made by mmdebstrap, cached in RELEASE_TEST_CACHE), the .rpm's metadata, the
## image in podman, the SBOMs; then upgrade-test. Needs root for podman and dpkg inside the
## container.
RELEASE_TEST_CACHE ?= $(HOME)/.cache/veil-exporter-release-test
release-test:
	@set -e; pkgs=""; \
	for c in podman:podman runc:runc mmdebstrap:mmdebstrap rpm:rpm gpg:gnupg promtool:prometheus; do \
	  command -v $${c%%:*} >/dev/null 2>&1 || pkgs="$$pkgs $${c#*:}"; done; \
	if [ -n "$$pkgs" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "make release-test: installing$$pkgs"; export DEBIAN_FRONTEND=noninteractive; \
	    apt-get update -qq; apt-get install -y -qq --no-install-recommends $$pkgs >/dev/null; \
	  else echo "make release-test needs:$$pkgs (sudo apt-get install$$pkgs)" >&2; exit 1; fi; \
	fi
	cd tools && $(GO) test -count=1 ./... && \
	  RELEASE_TEST_CACHE=$(RELEASE_TEST_CACHE) $(GO) test -count=1 -v -timeout 40m -tags releasetest ./releasetest/
	$(MAKE) upgrade-test

## upgrade-test: the previous release's exporter (built from the commit it names: the newest tag
## v*, else the commit that set VERSION; UPGRADE_FROM=<commit or tag> to choose) forwards events
## with its position in a file and in NATS KV and is killed; this version's exporter goes on from
## its state: every event once and in order (e2e/upgrade_test.go, build tag upgrade).
upgrade-test:
	VEIL_UPGRADE_FROM=$(UPGRADE_FROM) $(GO) test -count=1 -tags upgrade -run '^TestUpgradeFromThePreviousRelease$$' -timeout 15m ./e2e/
