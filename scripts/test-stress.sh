#!/usr/bin/env bash
# make test-stress: the packages whose tests wait on time, run STRESS_N times on one CPU beside a
# busy neighbour, and each test's failures out of its runs. A test that asserts how fast this
# machine is fails here; one that asserts what the configured times guarantee does not.
#
# The test binaries are built once (go test -c, with -race unless STRESS_RACE=0: make test runs
# with it), then run one package at a time, each run pinned by taskset to CPU STRESS_CPU (default
# 0) where a busy loop of a shell competes for it the whole time. Processes a test starts (the
# exporter, the simulator, NATS nodes) inherit the pinning.
#
# STRESS_PKGS (default "ha guest forwarder internal/daemon e2e"), STRESS_N (runs, default 10),
# STRESS_RUN (a -test.run pattern, default all), STRESS_TIMEOUT (per run, default 30m),
# STRESS_OUT (the logs, default bin/stress: one file per package and run).
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
PKGS=${STRESS_PKGS:-ha guest forwarder internal/daemon e2e}
N=${STRESS_N:-10}
RUN=${STRESS_RUN:-}
CPU=${STRESS_CPU:-0}
TIMEOUT=${STRESS_TIMEOUT:-30m}
OUT=${STRESS_OUT:-bin/stress}
race=(-race)
if [ "${STRESS_RACE:-1}" = 0 ]; then race=(); fi
command -v taskset >/dev/null || { echo "make test-stress needs taskset (Debian package util-linux)" >&2; exit 1; }

rm -rf "$OUT" && mkdir -p "$OUT"
bins=$(cd "$OUT" && pwd)
echo "== building ${race[*]:-without -race}: $PKGS"
for p in $PKGS; do
	"$GO" test "${race[@]}" -c -o "$OUT/${p//\//_}.test" "./$p"
done

busy=
cleanup() { if [ -n "$busy" ]; then kill "$busy" 2>/dev/null || true; fi; }
trap cleanup EXIT
trap 'exit 130' INT TERM
taskset -c "$CPU" sh -c 'while :; do :; done' &
busy=$!

# Each run's -test.v output is kept; a run's exit status goes into its .rc file.
for i in $(seq 1 "$N"); do
	for p in $PKGS; do
		name=${p//\//_}
		log="$OUT/$name.$i.log"
		start=$SECONDS
		rc=0
		(cd "$p" && taskset -c "$CPU" "$bins/$name.test" \
			-test.v -test.count=1 -test.timeout="$TIMEOUT" ${RUN:+-test.run "$RUN"}) >"$log" 2>&1 || rc=$?
		echo "$rc" >"$OUT/$name.$i.rc"
		echo "run $i/$N $p: exit $rc in $((SECONDS - start))s"
	done
done

# The summary: for each package every test (subtests too) that failed at least once, with its
# failures out of the runs it was in; a run that ended without a verdict for the test running
# (a panic, the timeout) counts as its failure.
echo
echo "== failures out of $N runs (STRESS_PKGS=\"$PKGS\"${RUN:+, STRESS_RUN=$RUN}, ${race[*]:-no race}, pinned to CPU $CPU beside a busy loop)"
total=0
for p in $PKGS; do
	name=${p//\//_}
	res=$(awk -v runs="$N" '
		FNR == 1 { file++ ; inrunning = 0 }
		/^ *--- (PASS|FAIL|SKIP): / { t = $3; seen[t] = 1; ran[t, file] = 1; if ($2 == "FAIL:") bad[t, file] = 1 }
		/^running tests:/ { inrunning = 1; next }
		inrunning && /^\t[A-Za-z]/ { t = $1; seen[t] = 1; ran[t, file] = 1; bad[t, file] = 1; next }
		inrunning { inrunning = 0 }
		/^(panic: |fatal error: |WARNING: DATA RACE)/ { crashed[file] = 1 }
		END {
			for (t in seen) {
				n = 0; f = 0
				for (k = 1; k <= file; k++) { if ((t, k) in ran) n++; if ((t, k) in bad) f++ }
				if (f > 0) printf "  %-70s %d/%d\n", t, f, n
			}
			for (k = 1; k <= file; k++) if (k in crashed) c++
			if (c > 0) printf "  %-70s %d/%d\n", "(runs with a panic, a timeout or a data race)", c, file
		}' "$OUT/$name".*.log | sort)
	fails=0
	for i in $(seq 1 "$N"); do
		if [ "$(cat "$OUT/$name.$i.rc")" != 0 ]; then fails=$((fails + 1)); fi
	done
	total=$((total + fails))
	echo "$p: $fails of $N runs failed"
	if [ -n "$res" ]; then echo "$res"; fi
done
echo "logs: $OUT/<package>.<run>.log"
[ "$total" = 0 ]
