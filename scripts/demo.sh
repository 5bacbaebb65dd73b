#!/usr/bin/env bash
# make demo: the simulator (a few hundred VMs, events flowing) and the exporter with an embedded
# NATS server, on loopback; when a prometheus binary is installed, also Prometheus with our alert
# rules scraping the exporter. A few simulated failures (a node in FAILED, a hung guest agent, a
# guest clock 5 s off) make alerts fire there. Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."

SIM_ADDR=${SIM_ADDR:-127.0.0.1:8765}
WEB_ADDR=${WEB_ADDR:-127.0.0.1:9867}
NATS_ADDR=${NATS_ADDR:-127.0.0.1:4222}
PROM_ADDR=${PROM_ADDR:-127.0.0.1:9090}
STATE=${STATE:-$(mktemp -d -t veil-demo.XXXXXX)}
mkdir -p "$STATE" # a STATE given may not exist yet
TOKEN=demo-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')

printf '%s\n' "$TOKEN" > "$STATE/demo.token"
chmod 600 "$STATE/demo.token"
cat > "$STATE/config.yaml" <<YAML
controllers:
  - name: demo
    url: http://$SIM_ADDR
    token_file: $STATE/demo.token
    max_concurrency: 8
    max_requests_per_second: 200
collect:
  interval: 10s
  device_details_interval: 1m   # a disk's bus and snapshots, a NIC's link state: ~17 requests/s here
guest:
  ping_interval: 15s
  fsinfo_interval: 30s
  time_interval: 1m
events:
  poll_interval: 2s
  start: earliest
  checkpoint: {store: file, dir: $STATE}
nats:
  url: nats://$NATS_ADDR
  embedded:
    enabled: true
    listen: $NATS_ADDR
    store_dir: $STATE/nats
YAML

pids=()      # the demo ends when one of these exits
helpers=()   # background helpers that may finish on their own
cleanup() {
  trap - INT TERM EXIT
  echo; echo "stopping..."
  for p in "${helpers[@]}" "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "stopped; state kept in $STATE"
  exit "$1"
}
trap 'cleanup 0' INT TERM   # Ctrl-C is how a demo ends
trap 'cleanup $?' EXIT

./bin/veil-sim --listen "$SIM_ADDR" --token "$TOKEN" --seed 1 --nodes 12 --clusters 2 --datapools 6 \
  --vms 300 --initial-events 200 --event-rate 2 --latency 5ms >"$STATE/veil-sim.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do
  curl -fsS -o /dev/null -H "Authorization: jwt $TOKEN" "http://$SIM_ADDR/api/nodes/?limit=1" 2>/dev/null && break
  sleep 0.1
done

# --web.enable-lifecycle: POST /-/reload reloads the config (off by default, as in Prometheus).
./bin/veil-exporter --config.file "$STATE/config.yaml" --web.listen-address "$WEB_ADDR" --web.enable-lifecycle \
  >"$STATE/veil-exporter.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  curl -fsS -o /dev/null "http://$WEB_ADDR/-/healthy" 2>/dev/null && break
  sleep 0.1
done

# Prometheus with the project's alert rules, when installed.
PROM_LINE="  Prometheus      not installed: to see the alerts fire, install it (Debian/Ubuntu: apt-get install prometheus;
                  or from https://prometheus.io/download/) and run make demo again"
if command -v prometheus >/dev/null 2>&1; then
  cat > "$STATE/prometheus.yml" <<YAML
global:
  scrape_interval: 10s
  evaluation_interval: 10s
rule_files:
  - $PWD/deploy/prometheus/veil-exporter.rules.yml
scrape_configs:
  - job_name: veil-exporter   # the rules expect this job name
    static_configs:
      - targets: ["$WEB_ADDR"]
YAML
  prometheus --config.file="$STATE/prometheus.yml" --storage.tsdb.path="$STATE/prometheus" \
    --web.listen-address="$PROM_ADDR" >"$STATE/prometheus.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    curl -fsS -o /dev/null "http://$PROM_ADDR/-/ready" 2>/dev/null && break
    sleep 0.1
  done
  # Debian's build has only the classic UI.
  alerts=/alerts
  curl -fsS -o /dev/null "http://$PROM_ADDR/alerts" 2>/dev/null || alerts=/classic/alerts
  PROM_LINE="  Prometheus      http://$PROM_ADDR$alerts   (our rules; VeilNodeNotActive fires after 5 min,
                  VeilGuestAgentNotAnswering and VeilGuestClockOffset after 10 min)"
fi

# Simulated failures, through the simulator's control API: one node FAILED at once; once the
# exporter has pinged the guests, one guest agent hangs and another guest's clock is 5 s off.
sim() { curl -fsS -o /dev/null -X POST -H 'Content-Type: application/json' -d "$2" "http://$SIM_ADDR/_sim/$1" 2>/dev/null; }
node=$(curl -fsS "http://$SIM_ADDR/_sim/ids" | grep -o '"nodes":\["[^"]*"' | sed 's/.*\["//; s/"$//')
[ -n "$node" ] && sim "nodes/$node/status" '{"status":"FAILED"}' || echo "couldn't set a node FAILED"
(
  for _ in $(seq 120); do
    doms=$(curl -fsS "http://$WEB_ADDR/metrics" 2>/dev/null | grep '^veil_guest_ping_success{.*} 1$' |
      grep -o 'domain_id="[^"]*"' | sed 's/domain_id="//; s/"$//' | head -2) || true
    if [ "$(printf '%s\n' "$doms" | grep -c .)" -ge 2 ]; then
      sim "domains/$(printf '%s\n' "$doms" | sed -n 1p)/hang" '{"hang":true}'
      sim "domains/$(printf '%s\n' "$doms" | sed -n 2p)/clock_offset" '{"seconds":5}'
      exit 0
    fi
    sleep 1
  done
  echo "no guest answered within 2 minutes: guest failures not simulated"
) >>"$STATE/demo-faults.log" 2>&1 &
helpers+=($!)

cat <<TXT

veil-exporter demo is running (state and logs in $STATE)

  status page     http://$WEB_ADDR/
  metrics         http://$WEB_ADDR/metrics
  reload          edit $STATE/config.yaml, then  curl -X POST http://$WEB_ADDR/-/reload
  simulator       http://$SIM_ADDR/api/docs/   (token in $STATE/demo.token)
  NATS            nats://$NATS_ADDR   stream VEIL_EVENTS, subjects veil.events.demo.>
                  e.g.  nats sub 'veil.events.demo.>'    (with the nats CLI)
                  or    go run ./scripts/subscribe -url nats://$NATS_ADDR -subject 'veil.events.demo.>'
$PROM_LINE

Press Ctrl-C to stop everything.
TXT
wait -n "${pids[@]}" || true
echo "a process exited; see the logs in $STATE"
exit 1
