#!/usr/bin/env bash
# Checks the alert rules and runs their unit tests with promtool.
# Exits non-zero when promtool is missing, a rule is invalid or a test fails.
# promtool comes with Prometheus (Debian: apt-get install prometheus).
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v promtool >/dev/null 2>&1; then
  echo "test.sh: promtool not found in PATH (apt-get install prometheus)" >&2
  exit 1
fi

promtool check rules veil-exporter.rules.yml
promtool test rules veil-exporter.rules.test.yml
promtool check config prometheus.yml
