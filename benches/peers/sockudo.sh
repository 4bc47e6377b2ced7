#!/usr/bin/env bash
# sockudo.sh: installs sockudo, the Rust Pusher Channels server that
# benches/pusher.sh measures weir's pusher route against, at a pinned
# version from crates.io (`cargo install --locked`), into $SOCKUDO_ROOT/bin
# (default $CARGO_TARGET_DIR/sockudo-bin). Nothing of sockudo is committed.
# Features: the local (in-memory) adapter and the Redis adapter; no
# OpenTelemetry (default-on upstream, not what is measured). One build job by
# default (CARGO_BUILD_JOBS) so a shared machine stays usable.
# Idempotent: an installed binary of the pinned version is kept.
set -euo pipefail
version="${SOCKUDO_VERSION:-5.2.0}"
target="${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}"
root="${SOCKUDO_ROOT:-$target/sockudo-bin}"
bin="$root/bin/sockudo"
if [ -x "$bin" ] && grep -qx "sockudo $version" "$root/.version" 2>/dev/null; then
  echo "sockudo $version already at $bin"; exit 0
fi
# System tools its build scripts run: cmake, and protoc (metrics-exporter-tcp).
missing=""
for tool in cmake:cmake protoc:protobuf-compiler; do
  command -v "${tool%%:*}" >/dev/null || missing="$missing ${tool#*:}"
done
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get install -y $missing
  else
    echo "sockudo's build needs:$missing (apt-get install$missing)" >&2; exit 1
  fi
fi
CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-1}" CARGO_TARGET_DIR="$target/sockudo" \
  cargo install sockudo --version "$version" --locked --root "$root" \
  --no-default-features --features "local,redis"
echo "sockudo $version" >"$root/.version"
echo "installed $bin"
