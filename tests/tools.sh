#!/usr/bin/env bash
# The tools the test command builds once per machine with `cargo install`, when missing: tansu
# (the broker of the crash and security tests), cargo-nextest (which runs the tests) and mdbook
# (which builds the manual). tests/run.sh runs this beside its other work, from the moment
# apt-get has installed the C compilers tansu's C parts need, and waits for it before the
# tests: on a fresh machine these builds took 11 of its 37.5 minutes one after the other, while
# the pip installs and the crate downloads before them left the cores idle (BENCHMARKS.md,
# "Issue 55, eighth part"). An installed tool is reused, as before.
set -euo pipefail

# tansu: an Apache-Kafka-compatible broker in its own process, for the crash-and-restart and
# security tests. Its sqlite storage (feature libsql) is the one that keeps SCRAM users, which
# tests/kafka_security.rs needs. A debug build: 5 min 56 s on 2 cores where the release build
# took about 15 minutes, and the tests that use it (kafka_security, crash_restart, restarts) ran
# as fast with it (71, 137 and 128 s against 71, 132 and 128 s). An installed one with both
# storage engines, debug or release, is reused.
if ! tansu --help 2>/dev/null | grep -q '^Storage engines:.*libsql'; then
  echo "installing tansu (a Kafka-compatible broker, with sqlite storage for SCRAM users)..."
  # Without debug info (nobody debugs the broker here): less for rustc and the linker to write.
  CARGO_PROFILE_DEV_DEBUG=0 cargo install tansu --locked --debug --features dynostore,libsql
fi

# cargo-nextest runs the tests. The machines this project runs on carry it; elsewhere it is
# built once.
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "installing cargo-nextest..."
  cargo install cargo-nextest --locked
fi

# mdbook without its default features (the `serve` and `watch` commands and the search index)
# builds the HTML: 4.5 minutes (3 CPU-minutes) measured on 2 cores shared with other builds.
if ! mdbook --version >/dev/null 2>&1; then
  echo "installing mdbook..."
  cargo install mdbook --locked --no-default-features
fi
echo "tools: $(tansu --version 2>&1 | head -1), $(cargo nextest --version 2>&1 | head -1), $(mdbook --version)"
