#!/usr/bin/env bash
# The soak of rolling restarts and crashes (docs/src/replicas.md): three replicas on
# librdkafka's mock cluster under steady traffic, a rolling restart of all three, a minute of
# quiet, a SIGKILL and its replacement, a minute of quiet, for SOAK_MINUTES (default 20).
# Prints every step's pauses and each replica's resident memory after every step; fails if a
# total differs from an uninterrupted replica's, a pause is out of bounds, or memory grows.
# Not part of the test command (it takes SOAK_MINUTES plus a few).
set -euo pipefail
cd "$(dirname "$0")/.."
export SOAK_MINUTES="${SOAK_MINUTES:-20}"
exec cargo test --locked --features oidc --test integration rolling_restart::soak -- --ignored --exact --nocapture
