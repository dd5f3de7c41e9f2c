#!/usr/bin/env bash
# The benchmark suite (BENCHMARKS.md): installs the reference tools when missing, then runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
# orjson: the trec_eval pipeline (benches/trec_pipeline.py) reads JSON with it, as a team that
# cares about speed would; without it, it falls back to json and replay's lead grows.
if ! python3 -c "import pytrec_eval, ranx, orjson" >/dev/null 2>&1; then
  echo "installing trec_eval (pytrec-eval-terrier), ranx and orjson for the comparison..."
  python3 -m pip install --quiet pytrec-eval-terrier ranx orjson
fi
cargo bench --bench pipeline --locked
