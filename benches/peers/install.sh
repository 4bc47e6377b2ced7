#!/usr/bin/env bash
# Installs the peer servers for benches/compare.sh into benches/peers:
#   node_modules/  uWebSockets.js (patched copy in uws/), ws, bun, deno  (npm)
#   rust/          tokio-tungstenite and fastwebsockets servers (cargo, release)
# Idempotent; safe to rerun. Needs node + npm and a Rust toolchain.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

echo "== npm peers"
npm install --no-audit --no-fund --loglevel=error

echo "== uWebSockets.js: patch the addon for this glibc"
abi="$(node -p process.versions.modules)"
src="node_modules/@btc-vision/uwebsockets.js/uws_linux_x64_${abi}.node"
[ -f "$src" ] || { echo "no uWS addon for Node ABI $abi ($src)" >&2; exit 1; }
mkdir -p uws
python3 patch-uws-glibc.py "$src" "uws/uws_linux_x64_${abi}.node"
node -e "require('./uws/uws_linux_x64_${abi}.node'); console.log('uWS addon loads')"

echo "== binaries"
bun=node_modules/bun/bin/bun.exe   # the postinstall links the platform binary here
deno=node_modules/@deno/linux-x64-glibc/deno
echo "bun $("$bun" --version)"
"$deno" --version | head -n1

echo "== Rust peers"
export CARGO_TARGET_DIR="${PEERS_TARGET:-${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}}"
cargo build --release --manifest-path rust/Cargo.toml
echo "peers ready"
