#!/usr/bin/env bash
# The wait a new user has: from `git clone` to the demo's first figures, as the README's first
# command gives them, with nothing downloaded or built yet; then the wait a developer has for a
# release rebuild after a one-line edit in the metrics and one in the engine.
#
#   bash benches/first_command.sh [runs]      (default 1; BENCHMARKS.md, "Issue 55")
#
# Each run clones this checkout's HEAD into a new temporary directory and uses a new, empty
# CARGO_HOME, so every crate is downloaded from crates.io and built (the toolchain is rustup's, as
# on the machines). It prints the seconds from the clone's start to the end of the build and to the
# demo's first line of figures (the first "MRR=" line: its topics start with the minute of traffic
# before it, whose searches are final once read, a few seconds after the start), then the seconds
# of `cargo build --release` after appending one line of code to src/metrics/mod.rs, and again to
# src/engine/mod.rs. Run it on an idle machine: it is a measurement, and other work on the 2
# cores shows in its figures.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-1}
source=$(pwd)
toolchain_bin=$(dirname "$(rustup which cargo)")
seconds() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", b - a }'; }

for run in $(seq 1 "$runs"); do
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  (
    export CARGO_HOME=$work/cargo-home PATH=$toolchain_bin:$PATH
    unset CARGO_TARGET_DIR CARGO_INCREMENTAL RUSTFLAGS
    start=$(date +%s.%N)
    git clone -q "$source" "$work/rankpulse"
    cd "$work/rankpulse"
    # The demo's output read line by line; it is stopped at its first line of figures.
    cargo run --release -- demo --listen 127.0.0.1:19465 2>"$work/demo.err" | while IFS= read -r line; do
      case $line in
        *MRR=*)
          if [ ! -e "$work/first-figures" ]; then
            date +%s.%N >"$work/first-figures"
            echo "run $run: first figures: $line"
            # cargo runs it by a relative path; the port is this script's own.
            pkill -INT -f "target/release/rankpulse demo --listen 127.0.0.1:19465" || true
          fi
          ;;
      esac
    done || true
    built=$(grep -m1 -o 'Finished .* in [0-9ms .]*' "$work/demo.err" || echo "no build line")
    [ -e "$work/first-figures" ] || { echo "run $run: the demo printed no figures; its log:" >&2; tail -20 "$work/demo.err" >&2; exit 1; }
    echo "run $run: clone to first figures $(seconds "$start" "$(cat "$work/first-figures")") s (cargo: $built)"
    for file in src/metrics/mod.rs src/engine/mod.rs; do
      echo 'const _: () = ();' >>"$file"
      edit_start=$(date +%s.%N)
      cargo build --release --quiet
      echo "run $run: release rebuild after one line added to $file: $(seconds "$edit_start" "$(date +%s.%N)") s"
    done
  )
  rm -rf "$work"
  trap - EXIT
done
