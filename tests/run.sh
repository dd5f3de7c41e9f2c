#!/usr/bin/env bash
# The test command of README.md (and of the manual, docs/src/getting-started.md). Installs what
# the tests need when it is missing, then runs every test (unit, integration against the mock
# Kafka cluster, demo, trec_eval conformance, the deployment files and the rules and dashboard
# against a real Prometheus) and builds the manual.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# What takes the time: each phase's wall-clock seconds, printed at the end (and on failure).
phase_started=$(date +%s)
phase_name="installing what is missing (apt-get, pip)"
phases=()
# And the disk left after each: the test binaries, the clean-room build and tansu take several
# GB, and a full disk shows up only as some test's "No space left on device".
phase() {
  local now
  now=$(date +%s)
  phases+=("$(printf '%6d s  %s (%s left on disk)' $((now - phase_started)) "$phase_name" "$(df -h --output=avail . | tail -1 | tr -d ' ')")")
  phase_started=$now
  phase_name=$1
}
report_phases() {
  phase done
  echo "test command phases:"
  printf '  %s\n' "${phases[@]}"
}
trap report_phases EXIT

# Debian's prometheus package: promtool checks every /metrics exposition the tests scrape, the
# shipped configuration and rules (and runs their unit tests), and tests/ecosystem.rs runs the
# prometheus server itself against the demo.
missing=()
command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
command -v python3 >/dev/null 2>&1 || missing+=(python3 python3-pip)
# The tests build rankpulse with the `oidc` feature (SASL OAUTHBEARER with OIDC token endpoints,
# tests/kafka_security.rs): librdkafka's configure looks for libcurl on the system (Cargo.toml,
# [features]). OpenSSL and zlib are built from source; the default build needs neither.
pkg-config --exists libcurl 2>/dev/null || missing+=(pkg-config libcurl4-openssl-dev)
# tests/kafka_security.rs: Debian's stunnel4 terminates TLS (and checks client certificates) in
# front of tansu, and openssl encrypts a test key.
command -v stunnel4 >/dev/null 2>&1 || missing+=(stunnel4)
# tests/trec_eval_conformance.rs builds NIST trec_eval 9.0.8 and 10.0 from tests/vendor/ with a
# plain make (gcc), about 10 seconds each, into target/trec_eval/.
command -v make >/dev/null 2>&1 || missing+=(make)
command -v gcc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
# librdkafka's configure refuses to run without a C++ compiler (it also builds its C++ wrapper).
command -v g++ >/dev/null 2>&1 || missing+=(g++)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
# tests/experiment_page.rs opens the experiment page in Debian's headless chromium through
# chromedriver (a font for its text and screenshots).
[ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] || missing+=(chromium chromium-driver fonts-dejavu-core)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]}..."
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The tools built once per machine with `cargo install` (tansu, cargo-nextest, mdbook; what each
# is for, in tests/tools.sh): from here, once apt-get has installed the C compilers, beside the
# pip installs and the test build rather than before them, in their own process group so that a
# failing test command stops them too. The tests wait for them (below).
mkdir -p target
setsid -w bash tests/tools.sh >target/tools.log 2>&1 &
tools=$!
trap 'kill -- -$tools 2>/dev/null || true; report_phases' EXIT

# python3 with PyYAML parses the deployment files (tests/deploy.rs): from PyPI, for the python3
# the tests run (the machines' is pyenv's, which Debian's python3-yaml does not reach).
if ! python3 -c 'import yaml' >/dev/null 2>&1; then
  echo "installing PyYAML..."
  python3 -m pip install --quiet --disable-pip-version-check --break-system-packages PyYAML==6.0.3
fi

# tests/your_events.rs produces with confluent-kafka's own Avro and Protobuf serializers and its
# SchemaRegistryClient (pinned in tests/your_events/requirements.txt; about 30 s from PyPI).
# --break-system-packages: a Debian python3 refuses pip installs without it (PEP 668).
# tests/input_files.rs writes Avro container files of every codec with it (cramjam, backports.zstd).
if ! python3 -c 'import confluent_kafka.schema_registry.avro, confluent_kafka.schema_registry.protobuf, fastavro, cramjam' >/dev/null 2>&1; then
  echo "installing confluent-kafka and its serializers' dependencies..."
  python3 -m pip install --quiet --disable-pip-version-check --break-system-packages \
    -r tests/your_events/requirements.txt
fi

# tests/experiment_statistics.rs computes its expected figures with GrowthBook's gbstats 0.8.0,
# statsmodels and scipy (pinned in tests/experiment_statistics/requirements.txt).
if ! python3 -c 'import gbstats.bayesian.tests, statsmodels.stats.multitest, scipy.stats' >/dev/null 2>&1; then
  echo "installing gbstats, statsmodels and scipy..."
  python3 -m pip install --quiet --disable-pip-version-check --break-system-packages \
    -r tests/experiment_statistics/requirements.txt
  python3 -m pip install --quiet --disable-pip-version-check --break-system-packages --no-deps gbstats==0.8.0
fi

# tests/experiment_page.rs drives chromium with Selenium (pinned in
# tests/experiment_page/requirements.txt), which talks WebDriver to Debian's chromedriver.
if ! python3 -c 'import selenium.webdriver' >/dev/null 2>&1; then
  echo "installing selenium..."
  python3 -m pip install --quiet --disable-pip-version-check --break-system-packages \
    -r tests/experiment_page/requirements.txt
fi

# The RustSec advisory snapshot in audit/ (CI cannot reach the database's own home): checked
# unedited and complete here, prints its date; tests/advisories.rs audits both lockfiles against
# it with the rustsec crate, as `cargo audit --deny warnings` would, without building cargo-audit
# (9.5 minutes on 2 cores) on every fresh machine.
phase "advisory snapshot check"
bash audit/check.sh

# --- completions and man pages ---
phase "build (the binary and every test), completions and man pages"
# One build of everything the tests run, as `cargo test` builds it. The tests' dev-dependencies
# turn on features of crates the binary shares (syn 3's `fold` for a proc macro, toml's `serde`),
# so after a `cargo build` the tests would build most dependencies and rankpulse a second time:
# 2 minutes more on 2 cores.
# Without incremental compilation when this target directory holds no incremental build (a
# fresh clone, CI): it only costs in a build from nothing, where rankpulse's 50 targets (now 6)
# took 79 s (151 CPU-seconds) without it and 132 s (247) with it on 2 cores. Where a developer has
# built incrementally, the test command does too, as switching would rebuild rankpulse; an
# exported CARGO_INCREMENTAL decides either way.
# The dependencies compiled once per machine and lockfile: a fresh clone (no target/debug) starts
# from the ones an earlier run of the test command on this machine compiled for the same
# Cargo.lock, rustc and cargo home, kept in ~/.cache/rankpulse/test-deps/ like tansu, mdbook and the clean
# room's chroot (about 1.5 GB; RANKPULSE_TEST_DEPS_CACHE=off builds from nothing). The build from
# nothing is the clean room's (below), on every run. Only the dependencies are kept, never
# rankpulse's own targets, which are built from this checkout; cargo checks every kept unit's
# fingerprint (compiler, profile, features, sources) as in any target directory and compiles
# what does not match (a feature changed in Cargo.toml), and then the kept ones are replaced.
# Measured on 2 cores: the build took 344 s from nothing, 61 s from them (BENCHMARKS.md,
# "Issue 55, fifth part").
deps_cache_root=${XDG_CACHE_HOME:-$HOME/.cache}/rankpulse/test-deps
# Keyed by the cargo home too: the units' fingerprints name the registry's sources by path.
deps_cache=$deps_cache_root/$(cat Cargo.lock <(rustc -vV) <(echo "${CARGO_HOME:-$HOME/.cargo}") | sha256sum | cut -c1-16)
keep_deps=false
if [ ! -d target/debug ] && [ "${RANKPULSE_TEST_DEPS_CACHE:-on}" != off ]; then
  keep_deps=true
  if [ -d "$deps_cache" ]; then
    mkdir -p target/debug
    cp -a --reflink=auto "$deps_cache/." target/debug/
    echo "the dependencies compiled by an earlier run on this machine: $deps_cache"
  fi
fi
if [ ! -d target/debug/incremental ]; then
  export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
fi
mkdir -p target
cargo test --locked --features oidc --all-targets --no-run 2>&1 | tee target/test-build.log
if $keep_deps && grep -E '^ *Compiling ' target/test-build.log | grep -q -v -E '^ *Compiling rankpulse v'; then
  # Everything but rankpulse's own units (its library, binary, tests, benchmark and build
  # script), into a new directory renamed into place, the older ones removed.
  rm -rf "$deps_cache_root" && mkdir -p "$deps_cache_root/new"
  tar -C target/debug -cf - \
    --exclude='./deps/rankpulse-*' --exclude='./deps/librankpulse-*' --exclude='./deps/integration-*' \
    --exclude='./deps/flood-*' --exclude='./deps/pipeline-*' --exclude='./.fingerprint/rankpulse-*' \
    --exclude='./build/rankpulse-*' --exclude='./rankpulse' --exclude='./rankpulse.d' \
    --exclude='./incremental' --exclude='./.cargo-lock' . | tar -C "$deps_cache_root/new" -xf -
  mv "$deps_cache_root/new" "$deps_cache"
  echo "the compiled dependencies kept for the next run from a fresh clone: $deps_cache ($(du -sh "$deps_cache" | cut -f1))"
fi
# Generated from the clap definitions by the debug binary, as a user's install would: shell
# completions into target/completions/, one man page per command into target/man/. Any failure
# fails the test command (set -e); tests/cli.rs checks what they contain.
rm -rf target/completions target/man
mkdir -p target/completions
./target/debug/rankpulse completions bash >target/completions/rankpulse.bash
./target/debug/rankpulse completions zsh >target/completions/_rankpulse
./target/debug/rankpulse completions fish >target/completions/rankpulse.fish
./target/debug/rankpulse man --out target/man >/dev/null
echo "completions in target/completions, $(ls target/man | wc -l) man pages in target/man"
# --- end of completions and man pages ---

phase "the tools built once (tansu, cargo-nextest, mdbook): what was left of them after the build"
if ! wait $tools; then
  echo "building the tools the tests need failed; target/tools.log:" >&2
  tail -40 target/tools.log >&2
  exit 1
fi
trap report_phases EXIT
tail -1 target/tools.log

# --- the manual (docs/) ---
phase "the manual (mdbook build)"
# The manual is an mdBook: tests/manual.rs checks its links, anchors, chapters and includes
# offline; here mdbook builds it into target/book (book.toml's build-dir), and a book that does
# not build fails the test command.
mdbook build docs
# --- end of the manual ---

# The first command on a machine with only Rust and build-essential: rankpulse built (default
# features) in a Debian chroot without pkg-config, libssl-dev, libcurl4-openssl-dev or zlib1g-dev,
# and `demo` run there for a few seconds (about 50 s for the chroot, once per machine, then a
# debug build from scratch: 303 s measured on an idle 2-core machine). It runs beside the tests, in its own
# process group so that a failing test command stops it too, at the lowest CPU and I/O priority.
# Where the kernel has autogroups (sched_autogroup_enabled), its new session is also an autogroup
# of its own and the scheduler shares the CPU between it and the tests' autogroup whatever the
# nice values: it took close to half the CPU while the tests ran (572 s beside them, 268 s
# alone). The machine is busy throughout the tests (under 1% idle in 20 s samples after their
# first minute), so putting the build behind them (its autogroup at nice 19) only moved its
# minutes after them: tests 584 s then 119 s of build, against 618 s with nothing left
# (BENCHMARKS.md, "Issue 55, third part").
phase "the tests (cargo nextest; the clean-room build and demo beside them)"
setsid -w nice -n 19 ionice -c 3 bash tests/clean_room.sh >target/clean-room.log 2>&1 &
clean_room=$!
trap 'kill -- -$clean_room 2>/dev/null || true; report_phases' EXIT
# cargo-nextest runs the tests of every binary side by side, each in a process of its own, where
# `cargo test` runs one binary after another; .config/nextest.toml says how many at once, which
# go first and which may not run together: 14 to 18 minutes of tests where `cargo test` took 29
# in CI (BENCHMARKS.md, "Issue 55"). Plain `cargo test` still runs them all, one binary at a time.
cargo nextest run --locked --features oidc --all-targets

phase "clean-room build and demo (what was left after the tests)"
if ! wait $clean_room; then
  echo "the clean-room build failed; target/clean-room.log:" >&2
  tail -40 target/clean-room.log >&2
  exit 1
fi
grep '^clean room:' target/clean-room.log
