#!/usr/bin/env bash
# README command 1: builds the guest components and runs the gateway on
# examples/routes.toml (native /echo and /relay, and the guest routes).
# Extra arguments go to `weir serve`, e.g. `bash scripts/serve.sh --listen 0.0.0.0:9001`.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v cargo >/dev/null || {
    echo "serve.sh: cargo not found; install Rust with rustup: https://rustup.rs" >&2
    exit 1
}

if [ -f scripts/build-guests.sh ]; then
    bash scripts/build-guests.sh
else
    echo "serve.sh: scripts/build-guests.sh not found; guest routes will not load" >&2
fi

exec cargo run --release -p weir -- serve examples/routes.toml "$@"
