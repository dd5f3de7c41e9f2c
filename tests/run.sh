#!/usr/bin/env bash
# The test command of README.md. Installs what the tests need when it is missing, then runs
# every test (unit, integration against the mock Kafka cluster, demo, trec_eval conformance).
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# promtool (Debian's prometheus package) checks every /metrics exposition the tests scrape.
if ! command -v promtool >/dev/null 2>&1; then
  echo "installing prometheus (for promtool)..."
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi

cargo test --all-targets --locked
