#!/usr/bin/env bash
# make demo-ha: three veil-exporter replicas sharing three simulated controllers, on a three-node
# NATS JetStream cluster, all on loopback. It prints each replica's status page and how to kill
# one and watch its controllers move. Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."

STATE=${STATE:-$(mktemp -d -t veil-demo-ha.XXXXXX)}
mkdir -p "$STATE" # a STATE given may not exist yet
NATS_PORTS=${NATS_PORTS:-4222,4223,4224}
TOKEN=demo-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')
printf '%s\n' "$TOKEN" > "$STATE/demo.token"
chmod 600 "$STATE/demo.token"

pids=()
cleanup() {
  trap - INT TERM EXIT
  echo; echo "stopping..."
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "stopped; state kept in $STATE"
  exit "$1"
}
trap 'cleanup 0' INT TERM
trap 'cleanup $?' EXIT

go build -o "$STATE/natscluster" ./scripts/natscluster
"$STATE/natscluster" -dir "$STATE/nats" -ports "$NATS_PORTS" >"$STATE/nats.urls" 2>"$STATE/nats.log" &
pids+=($!)
for _ in $(seq 300); do [ -s "$STATE/nats.urls" ] && break; sleep 0.1; done
[ -s "$STATE/nats.urls" ] || { echo "the NATS cluster did not start:"; cat "$STATE/nats.log"; exit 1; }
NATS_URLS=$(cat "$STATE/nats.urls")

controllers=""
for i in 1 2 3; do
  addr=127.0.0.1:$((8764 + i))
  ./bin/veil-sim --listen "$addr" --token "$TOKEN" --seed "$i" --nodes 6 --clusters 1 --datapools 3 \
    --vms 60 --initial-events 50 --event-rate 1 --latency 5ms >"$STATE/veil-sim-$i.log" 2>&1 &
  pids+=($!)
  controllers+="  - name: ctrl-$i
    url: http://$addr
    token_file: $STATE/demo.token
"
done

for r in a b c; do
  cat > "$STATE/replica-$r.yaml" <<YAML
controllers:
$controllers
collect:
  interval: 10s
guest:
  ping_interval: 15s
events:
  poll_interval: 1s
  start: earliest
  checkpoint: {store: nats_kv}
nats:
  url: "$NATS_URLS"
ha:
  enabled: true
  instance: replica-$r
  lease_ttl: 6s
  replicas: 3
YAML
done

declare -A web=([a]=127.0.0.1:9871 [b]=127.0.0.1:9872 [c]=127.0.0.1:9873)
for r in a b c; do
  ./bin/veil-exporter --config.file "$STATE/replica-$r.yaml" --web.listen-address "${web[$r]}" --web.enable-lifecycle \
    >"$STATE/replica-$r.log" 2>&1 &
  echo $! > "$STATE/replica-$r.pid"
  pids+=($!)
done
for r in a b c; do
  for _ in $(seq 100); do curl -fsS -o /dev/null "http://${web[$r]}/-/healthy" 2>/dev/null && break; sleep 0.1; done
done
sleep 3 # let the replicas share the controllers before showing who runs what

owners() {
  for r in a b c; do
    if ! m=$(curl -fsS "http://${web[$r]}/metrics" 2>/dev/null); then
      printf '  replica-%s  %-22s not answering\n' "$r" "http://${web[$r]}/"
      continue
    fi
    runs=$(printf '%s\n' "$m" | grep '^veil_ha_leader{.*} 1$' | grep -o 'controller="[^"]*"' |
      sed 's/controller="//; s/"$//' | tr '\n' ' ' || true)
    printf '  replica-%s  %-22s runs: %s\n' "$r" "http://${web[$r]}/" "${runs:-nothing yet}"
  done
}

cat <<TXT

veil-exporter replicas demo is running (state and logs in $STATE)

NATS cluster      $NATS_URLS   (stream VEIL_EVENTS, three replicas)
Status pages and who runs which controller:
$(owners)

Watch a hand-over:
  kill -9 \$(cat $STATE/replica-a.pid)     # killed: its controllers move within lease_ttl (6 s)
  kill -TERM \$(cat $STATE/replica-b.pid)  # stopped: its controllers move at once
  then open a remaining status page, or:  bash -c 'for p in 9871 9872 9873; do
    curl -s 127.0.0.1:\$p/metrics | grep "^veil_ha_leader.* 1\$"; done'
Reload:   edit $STATE/replica-a.yaml, then  curl -X POST http://${web[a]}/-/reload   (--web.enable-lifecycle)
Events:   go run ./scripts/subscribe -url nats://127.0.0.1:${NATS_PORTS%%,*} -subject 'veil.events.>'

Press Ctrl-C to stop everything.
TXT
# The demo goes on while replicas are killed: it ends with Ctrl-C or when the NATS cluster exits.
wait "${pids[0]}" || true
echo "the NATS cluster exited; see $STATE/nats.log"
exit 1
