# veil-exporter — build, test, demo, bench, lint.
GO        ?= go
BIN       := bin
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS   := -s -w -X main.version=$(VERSION) -X main.revision=$(REVISION)
PKGS      := ./...

.PHONY: all build test vet race fuzz-seed rules-test fuzz demo bench lint clean

all: build

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/veil-exporter ./cmd/veil-exporter
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/veil-sim ./cmd/veil-sim

## test: everything CI runs: vet, unit + integration + end-to-end tests with the race
## detector (fuzz targets run their seed corpora as ordinary tests), alert-rule unit tests.
test: vet race rules-test

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet $(PKGS)

race:
	$(GO) test -race -count=1 -timeout 13m $(PKGS)

rules-test:
	bash deploy/prometheus/test.sh

## fuzz: a longer fuzzing run of every fuzz target (not part of `make test`).
FUZZTIME ?= 30s
fuzz:
	@for t in $$($(GO) test -list '^Fuzz' ./veil | grep '^Fuzz'); do \
	  echo "== $$t"; $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) ./veil || exit 1; \
	done

## demo: the simulator + the exporter with an embedded NATS server; Ctrl-C stops both.
demo: build
	bash scripts/demo.sh

## bench: every performance goal as a ratio to its floor measured in the same run.
bench:
	bash scripts/bench.sh

lint: vet
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 $(PKGS)

clean:
	rm -rf $(BIN) bench/out
