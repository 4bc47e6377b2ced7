#!/usr/bin/env bash
# The pusher example in one command: builds weir (release) if needed,
# installs the example's pinned npm packages (pusher, pusher-js,
# laravel-echo) if missing, then starts `weir serve examples/pusher/routes.toml`
# and the chat's backend (server.mjs), prints the page's URL, and stops
# both, by their PIDs, on Ctrl-C or when either exits.
#
#   bash examples/pusher/run.sh
#
# PUSHER_APP_SECRET is the app's secret (weir verifies signatures with it,
# the backend signs with it); unset, a development secret is made up for
# this run and the script says so. The ports are routes.toml's (weir on
# 127.0.0.1:8080) and PORT (the page, 3000; routes.toml's `origins` lets
# that origin in, so change both together).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$repo"

for tool in cargo node npm; do
    command -v "$tool" >/dev/null || {
        echo "run.sh: $tool not found (Rust from https://rustup.rs; node and npm from your package manager)" >&2
        exit 1
    }
done

if [ -z "${PUSHER_APP_SECRET:-}" ]; then
    PUSHER_APP_SECRET="dev-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
    echo "run.sh: PUSHER_APP_SECRET is unset; using a development secret for this run only"
fi
export PUSHER_APP_SECRET
export PORT="${PORT:-3000}"

echo "run.sh: building weir (cargo build --release; quick when it is up to date)"
cargo build --release --quiet --bin weir
weir="${CARGO_TARGET_DIR:-$repo/target}/release/weir"

if [ ! -d "$here/node_modules/pusher" ] || [ ! -d "$here/node_modules/pusher-js" ] ||
    [ ! -d "$here/node_modules/laravel-echo" ]; then
    echo "run.sh: npm ci in examples/pusher (pusher, pusher-js, laravel-echo)"
    (cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
fi

if ! grep -q "\"http://127.0.0.1:$PORT\"" "$here/routes.toml"; then
    echo "run.sh: routes.toml's origins do not list http://127.0.0.1:$PORT: weir will refuse the page's WebSocket (403)" >&2
fi

pids=()
stop() {
    trap - INT TERM EXIT
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    wait 2>/dev/null || true
}
trap stop INT TERM EXIT

"$weir" serve "$here/routes.toml" &
pids+=($!)
# The backend calls weir's HTTP API, and the page connects, at routes.toml's listen address.
listen="$(sed -n 's/^listen *= *"\(.*\)".*/\1/p' "$here/routes.toml" | head -1)"
WEIR_HOST="${listen%:*}" WEIR_PORT="${listen##*:}" node "$here/server.mjs" &
pids+=($!)

sleep 1
echo
echo "run.sh: open http://127.0.0.1:$PORT/ in two browser windows (one private) and pick a name in each;"
echo "        Ctrl-C stops weir and the backend"
# Returns when either process exits; the trap stops the other.
wait -n
