#!/usr/bin/env bash
# benches/pubsub-cluster.sh — cross-node pub/sub through Redis: latency at a
# given publish rate and throughput, two weir nodes against one.
#
# Starts a redis-server on a free loopback port (scripts/redis.sh installs
# it) and two `weir serve` nodes (1 worker each) whose routes file has a
# native pubsub route and `[cluster] redis = …`. weir-load's fanout mode
# publishes on node A and subscribes N clients on node B (--sub-url), so every
# delivery crosses Redis; then the same load with publisher and subscribers
# on node A alone. Every message is verified (order, bytes); p50/p99 are
# publish-to-delivery latencies.
#
# Usage: benches/pubsub-cluster.sh [--rate 10000] [-c 100] [-s 64] [--runs 3]
#                                  [--warmup 1s] [--duration 3s]
# Environment: CARGO_TARGET_DIR (weir and weir-load built in release).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
target="${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}"
weir="${WEIR_BIN:-$target/release/weir}"
load="${WEIR_LOAD:-$target/release/weir-load}"
rate=10000 conns=100 size=64 runs=3 warmup=1s duration=3s
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) rate="$2"; shift 2 ;;
    -c) conns="$2"; shift 2 ;;
    -s) size="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --duration) duration="$2"; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$weir" ] && [ -x "$load" ] || { echo "build first: cargo build --release -p weir -p weir-load" >&2; exit 1; }
bash "$root/scripts/redis.sh"

dir="$(mktemp -d /tmp/weir-pubsub-cluster.XXXXXX)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
wait_port() {
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done
  echo "nothing listens on $1" >&2; return 1
}

rport="$(free_port)"
redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" >"$dir/redis.log" 2>&1 &
pids+=($!)
wait_port "$rport"
cat >"$dir/routes.toml" <<TOML
[server]
workers = 1

[[route]]
path = "/topic/{topic}"
native = "pubsub"

[cluster]
redis = "redis://127.0.0.1:$rport"
TOML
aport="$(free_port)"; bport="$(free_port)"
"$weir" serve "$dir/routes.toml" --listen "127.0.0.1:$aport" >"$dir/a.log" 2>&1 &
apid=$!; pids+=($apid)
"$weir" serve "$dir/routes.toml" --listen "127.0.0.1:$bport" >"$dir/b.log" 2>&1 &
bpid=$!; pids+=($bpid)
wait_port "$aport"; wait_port "$bport"

run() {
  local label="$1"; shift
  local line
  line="$("$load" fanout "$@" -c "$conns" -s "$size" -p 1000000 --rate "$rate" \
          --warmup "$warmup" --duration "$duration" 2>>"$dir/load.log" | grep '^RESULT ' | sed 's/^RESULT //')" || true
  python3 -c '
import json, sys
label, line = sys.argv[1], sys.argv[2]
if not line:
    print(f"  {label:<22} FAILED (no result)"); sys.exit()
r = json.loads(line)
state = "ok" if r.get("ok") else "FAILED"
print("  %-22s %10.0f deliveries/s  p50 %7.1f us  p99 %7.1f us  lost %s  %s" % (
    label, r.get("msgs_per_s") or 0, r.get("p50_us") or 0, r.get("p99_us") or 0, r.get("lost"), state))
' "$label" "$line"
}

echo "publish rate $rate msg/s, $conns subscribers, $size B; redis :$rport, nodes :$aport :$bport"
for i in $(seq "$runs"); do
  echo "run $i"
  if [ $((i % 2)) -eq 1 ]; then
    run "A -> B (via Redis)" --url "ws://127.0.0.1:$aport/topic/x$i" --sub-url "ws://127.0.0.1:$bport/topic/x$i"
    run "A -> A (one node)" --url "ws://127.0.0.1:$aport/topic/y$i"
  else
    run "A -> A (one node)" --url "ws://127.0.0.1:$aport/topic/y$i"
    run "A -> B (via Redis)" --url "ws://127.0.0.1:$aport/topic/x$i" --sub-url "ws://127.0.0.1:$bport/topic/x$i"
  fi
done
