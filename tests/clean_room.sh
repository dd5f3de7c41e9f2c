#!/usr/bin/env bash
# The first command on a machine with only Rust and build-essential: builds rankpulse from this
# checkout inside a Debian chroot that has a C and C++ compiler, make and perl (build-essential,
# what the official rust image carries) and none of pkg-config, libssl-dev, libcurl4-openssl-dev
# or zlib1g-dev; checks that the binary links none of those libraries, that an OIDC
# configuration (the `oidc` feature, which needs libcurl) is refused saying how to get it, then
# runs `rankpulse demo` there for a few seconds and checks that events went through to /metrics.
# tests/run.sh runs it.
#
#   bash tests/clean_room.sh [--release]
#
# The chroot is made once per machine with Debian's debootstrap (about 50 s, from Debian's
# mirror) into ~/.cache/rankpulse/clean-room-<suite> (RANKPULSE_CLEAN_ROOM_ROOT elsewhere) and
# kept there, as tansu and mdbook are kept once installed: it holds a bare Debian, nothing of
# rankpulse's. The build (a debug build unless --release) goes beside it, into
# ~/.cache/rankpulse/clean-room-<suite>-target, and is kept there too: the dependencies (OpenSSL,
# librdkafka, zlib, zstd, xz and the crates, about 500 of the clean room's 600 CPU-seconds) are
# built in the chroot once per machine and Cargo.lock, and cargo builds again whatever a changed
# lockfile, feature, build script or toolchain touches, in the chroot. rankpulse itself is built
# from this checkout on every run (`cargo clean -p rankpulse` first: cargo's own freshness check
# compares file times, and another checkout's older files would pass for built).
# The host's Rust toolchain and cargo's registry cache are bind-mounted
# read-only and read-write, in a private mount namespace (unshare) with a /tmp of its own, so
# nothing stays mounted when the script ends and two checkouts can use the chroot at once.
# Needs root (debootstrap, chroot).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
profile=debug
cargo_flags=(--locked)
if [ "${1:-}" = --release ]; then profile=release; cargo_flags+=(--release); fi

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
command -v debootstrap >/dev/null 2>&1 || {
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
}

room=$repo/target/clean-room
suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
root=${RANKPULSE_CLEAN_ROOM_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/rankpulse/clean-room-$suite}
build=$root-target
# What a Rust image carries to build -sys crates: C and C++ compilers (librdkafka's configure
# refuses to run without a C++ one), make and perl (OpenSSL's Configure is perl).
# ca-certificates only so the chroot looks like such an image; the build is offline.
packages=gcc,g++,libc6-dev,make,perl,ca-certificates
case "$root" in /*/*) ;; *) echo "clean room: $root is not a directory to make a chroot in" >&2; exit 1 ;; esac
mkdir -p "$room"
# Written last: a debootstrap that was interrupted leaves no marker and is made again.
made="$root/.rankpulse-clean-room-$packages"
if [ ! -e "$made" ]; then
  echo "clean room: debootstrap $suite ($packages) into $root..."
  rm -rf "$root"
  mkdir -p "$(dirname "$root")"
  start=$(date +%s)
  as_root debootstrap --variant=minbase --include="$packages" "$suite" "$root" http://deb.debian.org/debian >"$room/debootstrap.log" 2>&1 \
    || { tail -20 "$room/debootstrap.log" >&2; exit 1; }
  touch "$made"
  echo "clean room: made in $(($(date +%s) - start)) s"
else
  echo "clean room: the chroot made earlier on this machine, $root"
fi

# The point of the exercise: none of what the build used to need from the system is there.
for absent in usr/bin/pkg-config usr/include/openssl/ssl.h usr/include/x86_64-linux-gnu/curl/curl.h usr/include/curl/curl.h usr/include/zlib.h; do
  if [ -e "$root/$absent" ]; then
    echo "clean room: $root/$absent exists; the chroot is not clean (rm -rf $root)" >&2
    exit 1
  fi
done

rustup_home=${RUSTUP_HOME:-$HOME/.rustup}
cargo_home=${CARGO_HOME:-$HOME/.cargo}
mkdir -p "$build"
# Cargo.lock's crates are in the host's registry cache (tests/run.sh builds before this), so the
# chroot builds offline: no network, no DNS, and no system library can come in that way.
cat >"$room/inside.sh" <<EOF
set -euo pipefail
export RUSTUP_HOME=/opt/rustup CARGO_HOME=/opt/cargo PATH=/opt/cargo/bin:/usr/bin:/bin
export CARGO_TARGET_DIR=/build CARGO_NET_OFFLINE=true
# A build from nothing, for one run: incremental compilation only costs there, and debug info
# (of the Rust crates and, through cc's flags, of the C libraries) is read by nobody. Measured on
# an idle 2-core machine: 303 s and 565 CPU-seconds, where the dev profile's took 349 s and 670.
export CARGO_INCREMENTAL=0 CARGO_PROFILE_DEV_DEBUG=0
cd /src
start=\$(date +%s)
cargo clean ${cargo_flags[*]} -p rankpulse
cargo build ${cargo_flags[*]} --bin rankpulse 2>&1 | tee /tmp/build.log
units=\$(grep -c '^ *Compiling ' /tmp/build.log || true)
echo "clean room: built in \$((\$(date +%s) - start)) s (cargo compiled \$units of its crates; what earlier runs built in this chroot is kept in $build)"
bin=/build/$profile/rankpulse
if ldd "\$bin" | grep -E 'libssl|libcrypto|libcurl|libz\.'; then
  echo "clean room: rankpulse links the system's libraries above" >&2
  exit 1
fi
cd /tmp
printf '[kafka.properties]\n"sasl.mechanisms" = "OAUTHBEARER"\n"sasl.oauthbearer.method" = "oidc"\n' >/tmp/oidc.toml
if "\$bin" check-config --config /tmp/oidc.toml >/tmp/oidc.log 2>&1 || ! grep -q -- '--features oidc' /tmp/oidc.log; then
  echo "clean room: an OIDC configuration was not refused with the way to build it:" >&2
  cat /tmp/oidc.log >&2
  exit 1
fi
"\$bin" demo --listen 127.0.0.1:19464 >/tmp/demo.log 2>&1 &
demo=\$!
for _ in \$(seq 1 60); do
  sleep 0.5
  if { exec 3<>/dev/tcp/127.0.0.1/19464; } 2>/dev/null; then
    printf 'GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
    # Events went through the in-process Kafka cluster and the engine.
    processed=\$(grep -m1 '^rankpulse_event_processing_seconds_count ' <&3 | cut -d' ' -f2 || true)
    if [ -n "\$processed" ] && [ "\$processed" != 0 ]; then
      kill -INT \$demo; wait \$demo || true
      echo "clean room: the demo processed \$processed events and served them on /metrics"
      exit 0
    fi
    exec 3>&-
  fi
  kill -0 \$demo 2>/dev/null || break
done
echo "clean room: the demo did not serve its metrics; its output:" >&2
cat /tmp/demo.log >&2
kill \$demo 2>/dev/null || true
exit 1
EOF

mkdir -p "$root/opt/rustup" "$root/opt/cargo" "$root/src" "$root/build"
as_root unshare --mount --fork bash -euc "
  mount --make-rprivate /
  mount --bind '$rustup_home' '$root/opt/rustup' && mount -o remount,bind,ro '$root/opt/rustup'
  mount --bind '$cargo_home' '$root/opt/cargo'
  mount --bind '$repo' '$root/src' && mount -o remount,bind,ro '$root/src'
  mount --bind '$build' '$root/build'
  mount -t proc proc '$root/proc'
  mount -t tmpfs tmpfs '$root/tmp'
  mount --bind /dev '$root/dev'
  chroot '$root' /bin/bash /src/target/clean-room/inside.sh
"
