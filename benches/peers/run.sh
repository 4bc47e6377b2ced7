#!/usr/bin/env bash
# run.sh NAME PORT: exec one peer server in the foreground, so the PID the
# caller started IS the server (its /proc/PID/stat is what gets measured).
# NAME: uws | uws-cpp | ws | bun | deno | tungstenite | fastws, or uws-tls | bun-tls
# (wss://: uWS.SSLApp, Bun.serve's tls) with the PEM files TLS_CERT and
# TLS_KEY from the environment. uws-cpp is the C++ uWebSockets peer built by
# build-uws-cpp.sh (UWS_CPP_BIN, default $CARGO_TARGET_DIR/uws-cpp/uws-cpp;
# UWS_CPP_THREADS event loops, default 1).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
name="${1:?usage: run.sh NAME PORT}"
port="${2:?usage: run.sh NAME PORT}"
# PEERS_TARGET: where install.sh built the Rust peers, if not CARGO_TARGET_DIR.
target="${PEERS_TARGET:-${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}}/release"
case "$name" in
  uws)         exec node "$here/js/uws-server.js" "$port" ;;
  ws)          exec node "$here/js/ws-server.js" "$port" ;;
  bun)         exec "$here/node_modules/bun/bin/bun.exe" "$here/js/bun-server.js" "$port" ;;
  deno)        DENO_NO_UPDATE_CHECK=1 exec "$here/node_modules/@deno/linux-x64-glibc/deno" run \
                 --allow-net --allow-env "$here/js/deno-server.js" "$port" ;;
  uws-tls|bun-tls)
    [ -f "${TLS_CERT:-}" ] && [ -f "${TLS_KEY:-}" ] || { echo "$name needs TLS_CERT and TLS_KEY (PEM files)" >&2; exit 2; }
    export TLS_CERT TLS_KEY
    exec "$0" "${name%-tls}" "$port" ;;
  uws-cpp)     exec "${UWS_CPP_BIN:-${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}/uws-cpp/uws-cpp}" \
                 "$port" "${UWS_CPP_THREADS:-1}" ;;
  tungstenite) exec "$target/tungstenite" "$port" ;;
  fastws)      exec "$target/fastws" "$port" ;;
  *) echo "unknown peer $name" >&2; exit 2 ;;
esac
