#!/usr/bin/env bash
# soketi.sh: installs soketi (the Node Pusher server benches/pusher.sh also
# measures weir's pusher route against) at a pinned version from the npm
# registry into $SOKETI_DIR (default $CARGO_TARGET_DIR/soketi): `npm ci`
# from peers/soketi/ (package.json and its lock file; nothing of soketi is
# committed). soketi 1.6.1 asks for uWebSockets.js from GitHub; the
# override in package.json points it at the npm-published build
# (@btc-vision/uwebsockets.js 20.57.0, as peers/install.sh), whose addon is
# patched for this glibc the same way (patch-uws-glibc.py). Idempotent.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
target="${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}"
dest="${SOKETI_DIR:-$target/soketi}"
mkdir -p "$dest"
cp "$here/soketi/package.json" "$here/soketi/package-lock.json" "$dest/"
cd "$dest"
npm ci --no-audit --no-fund --loglevel=error
abi="$(node -p process.versions.modules)"
addon="node_modules/uWebSockets.js/uws_linux_x64_${abi}.node"
[ -f "$addon" ] || { echo "no uWS addon for Node ABI $abi ($addon)" >&2; exit 1; }
[ -f "$addon.orig" ] || cp "$addon" "$addon.orig"
python3 "$here/patch-uws-glibc.py" "$addon.orig" "$addon"
node -e "require('./$addon'); console.log('uWS addon loads')"
echo "soketi $(node -p "require('./node_modules/@soketi/soketi/package.json').version") at $dest"
