#!/usr/bin/env bash
# Rebuilds the committed corpus of a fuzz target from everything found so far, small enough to
# replay in CI: `cargo fuzz cmin` keeps every input that adds a coverage feature (hundreds to a
# thousand per target); this keeps the fewest inputs, up to CAP, that cover the most edges.
#
#   bash fuzz/minimize.sh TARGET [CAP]     (CAP: 100 by default)
#
# Reads fuzz/corpus/TARGET, fuzz/work/TARGET (what `cargo fuzz run` found) and fuzz/seeds/TARGET;
# writes fuzz/corpus/TARGET and says how many edges it keeps. Needs the target built
# (`cargo +nightly fuzz build TARGET`) and python3.
set -euo pipefail
target=$1
cap=${2:-100}
cd "$(dirname "$0")"
binary=target/x86_64-unknown-linux-gnu/release/$target
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/all" "$scratch/merged" corpus/"$target" work/"$target" seeds/"$target"
cp corpus/"$target"/. work/"$target"/. seeds/"$target"/. "$scratch/all/" -r 2>/dev/null || true
# libFuzzer's merge, on edges only (no hit counts), recording what each input covers.
"$binary" -merge=1 -use_counters=0 -merge_control_file="$scratch/control" -rss_limit_mb=2048 \
  -malloc_limit_mb=512 "$scratch/merged" "$scratch/all" >"$scratch/log" 2>&1 || { cat "$scratch/log"; exit 1; }
python3 - "$scratch/control" "$cap" >"$scratch/chosen" <<'PY'
import sys
lines = open(sys.argv[1]).read().split("\n")
n = int(lines[0])
files = lines[2 : 2 + n]
cover, size = {}, {}
for line in lines[2 + n :]:
    p = line.split()
    if p and p[0] == "COV":
        cover[int(p[1])] = set(map(int, p[2:]))
    if p and p[0] == "STARTED":
        size[int(p[1])] = int(p[2])
edges = set().union(*cover.values()) if cover else set()
covered, chosen = set(), []
while len(chosen) < int(sys.argv[2]):
    # The input adding most edges not covered yet; the smaller one on a tie.
    best = max(cover, key=lambda i: (len(cover[i] - covered), -size.get(i, 0)), default=None)
    if best is None or not cover[best] - covered:
        break
    chosen.append(best)
    covered |= cover[best]
print(f"{len(chosen)} inputs keep {len(covered)} of {len(edges)} edges", file=sys.stderr)
for i in chosen:
    print(files[i])
PY
rm -rf corpus/"$target"
mkdir -p corpus/"$target"
while read -r file; do
  cp "$file" corpus/"$target"/"$(sha1sum "$file" | cut -c1-16)"
done <"$scratch/chosen"
echo "$target: $(ls corpus/"$target" | wc -l) inputs in fuzz/corpus/$target"
