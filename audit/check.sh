#!/usr/bin/env bash
# Checks the committed snapshot of the RustSec advisory database that tests/advisories.rs audits
# Cargo.lock and fuzz/Cargo.lock against (tests/run.sh runs this first): that it is what
# audit/refresh.sh copied (every file's git blob id as listed in SNAPSHOT, no file added), that it
# covers every crate in the lockfiles, and says which commit and date it is.
set -euo pipefail
cd "$(dirname "$0")/.."
db=audit/advisory-db
snapshot=$db/SNAPSHOT

listed=$(sed -n 's/^file \([0-9a-f]*\) \(.*\)$/\1 \2/p' "$snapshot" | sort)
found=$(cd "$db" && find crates -type f | sort | while read -r path; do echo "$(git hash-object "$path") $path"; done | sort -k2)
if [ "$(echo "$listed" | sort -k2)" != "$found" ]; then
  echo "audit: $db differs from what $snapshot lists (edited, added or removed files):" >&2
  diff <(echo "$listed" | sort -k2) <(echo "$found") >&2 || true
  exit 1
fi
covered=$(sed -n 's/^covers //p' "$snapshot" | tr ' ' '\n' | sort -u)
needed=$(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.lock fuzz/Cargo.lock | sort -u)
uncovered=$(comm -23 <(echo "$needed") <(echo "$covered"))
if [ -n "$uncovered" ]; then
  echo "audit: the advisory snapshot does not cover $(echo $uncovered); run audit/refresh.sh with a clone of rustsec/advisory-db" >&2
  exit 1
fi
echo "audit: RustSec advisory database as of $(sed -n 's/^date //p' "$snapshot") (rustsec/advisory-db $(sed -n 's/^commit //p' "$snapshot" | cut -c1-12)), $(echo "$listed" | wc -l) advisories of the $(echo "$needed" | wc -l) crates in the lockfiles"
