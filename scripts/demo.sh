#!/usr/bin/env bash
# make demo: the simulator (a few hundred VMs, events flowing) and the exporter with an embedded
# NATS server, on loopback. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."

SIM_ADDR=${SIM_ADDR:-127.0.0.1:8765}
WEB_ADDR=${WEB_ADDR:-127.0.0.1:9867}
NATS_ADDR=${NATS_ADDR:-127.0.0.1:4222}
STATE=${STATE:-$(mktemp -d -t veil-demo.XXXXXX)}
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

pids=()
cleanup() {
  trap - INT TERM EXIT
  echo; echo "stopping..."
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
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

./bin/veil-exporter --config.file "$STATE/config.yaml" --web.listen-address "$WEB_ADDR" \
  >"$STATE/veil-exporter.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  curl -fsS -o /dev/null "http://$WEB_ADDR/-/healthy" 2>/dev/null && break
  sleep 0.1
done

cat <<TXT

veil-exporter demo is running (state and logs in $STATE)

  status page     http://$WEB_ADDR/
  metrics         http://$WEB_ADDR/metrics
  simulator       http://$SIM_ADDR/api/docs/   (token in $STATE/demo.token)
  NATS            nats://$NATS_ADDR   stream VEIL_EVENTS, subjects veil.events.demo.>
                  e.g.  nats sub 'veil.events.demo.>'    (with the nats CLI)
                  or    go run ./scripts/subscribe -url nats://$NATS_ADDR -subject 'veil.events.demo.>'

Press Ctrl-C to stop both.
TXT
wait -n "${pids[@]}" || true
echo "a process exited; see the logs in $STATE"
exit 1
