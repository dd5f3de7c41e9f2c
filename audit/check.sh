#!/usr/bin/env bash
# cargo audit of Cargo.lock and fuzz/Cargo.lock against the committed snapshot of the RustSec
# advisory database, offline (tests/run.sh runs it). Checks first that the snapshot is what
# audit/refresh.sh copied (every file's git blob id as listed in SNAPSHOT, no file added) and
# that it covers every crate in the lockfiles; says which commit and date it is; then makes sure
# the database is read at all, with a lockfile of a version it knows to be affected.
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

# The database is read and matched: bytes 1.11.0 is affected by RUSTSEC-2026-0007.
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf 'version = 4\n\n[[package]]\nname = "bytes"\nversion = "1.11.0"\n%s\n' "$(grep -m1 '^source = "registry' Cargo.lock)" >"$probe/Cargo.lock"
if cargo audit --db "$db" --no-fetch --file "$probe/Cargo.lock" >"$probe/out" 2>&1 || ! grep -q RUSTSEC-2026-0007 "$probe/out"; then
  echo "audit: the snapshot did not flag a known-affected version; is $db readable?" >&2
  cat "$probe/out" >&2
  exit 1
fi

for lock in Cargo.lock fuzz/Cargo.lock; do
  cargo audit --db "$db" --no-fetch --deny warnings --file "$lock"
done
