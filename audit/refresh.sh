#!/usr/bin/env bash
# Refreshes audit/advisory-db/, the snapshot of the RustSec advisory database (the git
# repository rustsec/advisory-db) that tests/run.sh audits Cargo.lock and fuzz/Cargo.lock
# against: CI cannot reach the database's own home, so it is committed here.
#
#   bash audit/refresh.sh PATH    PATH: a clone of rustsec/advisory-db (or its git directory)
#
# It copies, byte for byte from the clone's HEAD commit, the advisories (crates/NAME/*.md) of
# every crate named in the two lockfiles, and writes audit/advisory-db/SNAPSHOT: the commit and
# its date, the crate names covered, and the git blob id of every copied file in that commit,
# so that anyone can check them against the upstream repository (`git ls-tree -r COMMIT crates/`
# there lists the same ids), and audit/check.sh checks that they were not edited since. After
# adding a dependency, run it again (check.sh names the crates the snapshot does not cover).
set -euo pipefail
repo=$1
cd "$(dirname "$0")/.."
out=audit/advisory-db
names=$(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.lock fuzz/Cargo.lock | sort -u)
commit=$(git -C "$repo" rev-parse HEAD)
rm -rf "$out"
mkdir -p "$out/crates"
{
  echo "# RustSec advisories of the crates in Cargo.lock and fuzz/Cargo.lock, copied by audit/refresh.sh."
  echo "source rustsec/advisory-db"
  echo "commit $commit"
  echo "date $(git -C "$repo" log -1 --format=%cI "$commit")"
  echo "covers $(echo $names)"
  for name in $names; do
    git -C "$repo" ls-tree -r "$commit" -- "crates/$name/" | while read -r _mode _type blob path; do
      mkdir -p "$out/$(dirname "$path")"
      git -C "$repo" cat-file blob "$blob" >"$out/$path"
      echo "file $blob $path"
    done
  done
} >"$out/SNAPSHOT"
echo "$(grep -c '^file ' "$out/SNAPSHOT") advisories of $(echo "$names" | wc -l) crates from $commit"
