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

# tansu: an Apache-Kafka-compatible broker in its own process, for the crash-and-restart test.
# About 15 minutes to build on 2 cores, so an installed one is reused.
if ! tansu --version >/dev/null 2>&1; then
  echo "installing tansu (a Kafka-compatible broker) for the crash test..."
  cargo install tansu --locked --features dynostore
fi

cargo test --all-targets --locked
