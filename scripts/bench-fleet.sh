#!/usr/bin/env bash
# make bench-fleet: the large fleet (e2e BenchmarkFleet500) — 500 controllers of 100 VMs served
# by one bin/veil-sim process, ten bin/veil-exporter replicas, a three-node NATS cluster — in one
# run: settle, kill -9 of a replica, a rolling restart of all ten, a NATS node killed and started
# again, the whole NATS cluster down for 30 s; then every controller's events judged against the
# simulator's journal. Its figures join bench/out/results.json (written by make bench, or
# created), replacing those of an earlier bench-fleet run. Kept apart from make bench, which it
# would lengthen by its ten minutes.
#
# Scaled down while developing: VEIL_FLEET_CONTROLLERS, VEIL_FLEET_VMS, VEIL_FLEET_REPLICAS,
# VEIL_FLEET_LEASE_TTL (default 15s), VEIL_FLEET_INTERVAL, VEIL_FLEET_POLL, VEIL_FLEET_FEED,
# VEIL_FLEET_OUTAGE, VEIL_FLEET_SOLO=0 (no one-exporter window: no requests ratio).
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=bench/out
mkdir -p "$OUT"
RAW="$OUT/fleet.txt"
echo "== building [at ${SECONDS}s]" | tee "$RAW"
go test -c -o "$OUT/e2e.test" ./e2e
echo "== large fleet [at ${SECONDS}s]" | tee -a "$RAW"
(cd e2e && ../"$OUT/e2e.test" -test.run '^$' -test.bench '^BenchmarkFleet500$' -test.benchtime 1x -test.count 1 \
  -test.timeout 20m) | tee -a "$RAW" || echo "large fleet benchmark failed: not measured"
echo
go run ./bench/report -merge -commit "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet -- ha internal 2>/dev/null || echo -dirty)" \
  -elapsed "$SECONDS" -out "$OUT/results.json" "$RAW"
