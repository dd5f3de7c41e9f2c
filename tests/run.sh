#!/usr/bin/env bash
# The test command of README.md (and of the manual, docs/src/getting-started.md). Installs what
# the tests need when it is missing, then runs every test (unit, integration against the mock
# Kafka cluster, demo, trec_eval conformance, the deployment files and the rules and dashboard
# against a real Prometheus) and builds the manual.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# Debian's prometheus package: promtool checks every /metrics exposition the tests scrape, the
# shipped configuration and rules (and runs their unit tests), and tests/ecosystem.rs runs the
# prometheus server itself against the demo. python3 with PyYAML parses the deployment files.
missing=()
command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
python3 -c 'import yaml' >/dev/null 2>&1 || missing+=(python3 python3-yaml)
# librdkafka is built with TLS (SASL_SSL, SCRAM, mTLS) against Debian's OpenSSL and with libcurl
# (SASL OAUTHBEARER with OIDC token endpoints), found through pkg-config.
pkg-config --exists openssl 2>/dev/null || missing+=(pkg-config libssl-dev)
pkg-config --exists libcurl 2>/dev/null || missing+=(pkg-config libcurl4-openssl-dev)
# tests/kafka_security.rs: Debian's stunnel4 terminates TLS (and checks client certificates) in
# front of tansu, and openssl encrypts a test key.
command -v stunnel4 >/dev/null 2>&1 || missing+=(stunnel4)
# tests/trec_eval_conformance.rs builds NIST trec_eval 9.0.8 and 10.0 from tests/vendor/ with a
# plain make (gcc), about 10 seconds each, into target/trec_eval/.
command -v make >/dev/null 2>&1 || missing+=(make)
command -v gcc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]}..."
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# tests/your_events.rs produces with confluent-kafka's own Avro and Protobuf serializers and its
# SchemaRegistryClient (pinned in tests/your_events/requirements.txt; about 30 s from PyPI).
# --break-system-packages: a Debian python3 refuses pip installs without it (PEP 668).
if ! python3 -c 'import confluent_kafka.schema_registry.avro, confluent_kafka.schema_registry.protobuf, fastavro' >/dev/null 2>&1; then
  echo "installing confluent-kafka and its serializers' dependencies..."
  python3 -m pip install --quiet --disable-pip-version-check --break-system-packages \
    -r tests/your_events/requirements.txt
fi

# tansu: an Apache-Kafka-compatible broker in its own process, for the crash-and-restart and
# security tests. Its sqlite storage (feature libsql) is the one that keeps SCRAM users, which
# tests/kafka_security.rs needs. About 15 minutes to build on 2 cores, so an installed one with
# both storage engines is reused.
if ! tansu --help 2>/dev/null | grep -q '^Storage engines:.*libsql'; then
  echo "installing tansu (a Kafka-compatible broker, with sqlite storage for SCRAM users)..."
  cargo install tansu --locked --features dynostore,libsql
fi

# cargo audit of Cargo.lock and fuzz/Cargo.lock against the committed snapshot of the RustSec
# advisory database in audit/ (CI cannot reach the database's own home): prints the snapshot's
# date first. Building cargo-audit takes 7 CPU-minutes (9.5 minutes measured on 2 cores shared
# with other builds), so an installed one is reused.
if ! cargo audit --version >/dev/null 2>&1; then
  echo "installing cargo-audit..."
  cargo install cargo-audit --locked
fi
bash audit/check.sh

# --- the manual (docs/) ---
# The manual is an mdBook: tests/manual.rs checks its links, anchors, chapters and includes
# offline; here mdbook builds it into target/book (book.toml's build-dir), and a book that does
# not build fails the test command. mdbook without its default features (the `serve` and `watch`
# commands and the search index) builds the HTML: 4.5 minutes (3 CPU-minutes) measured on 2
# cores shared with other builds, so an installed one is reused.
if ! mdbook --version >/dev/null 2>&1; then
  echo "installing mdbook..."
  cargo install mdbook --locked --no-default-features
fi
mdbook build docs
# --- end of the manual ---

cargo test --all-targets --locked
