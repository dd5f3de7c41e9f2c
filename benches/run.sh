#!/usr/bin/env bash
# The benchmark suite (BENCHMARKS.md): installs the reference tools when missing, then runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! python3 -c "import pytrec_eval, ranx" >/dev/null 2>&1; then
  echo "installing trec_eval (pytrec-eval-terrier) and ranx for the comparison..."
  python3 -m pip install --quiet pytrec-eval-terrier ranx
fi
cargo bench --bench pipeline --locked
