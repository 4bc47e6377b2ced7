#!/usr/bin/env bash
# benches/drain.sh — the reconnect storm a drain sends to the surviving
# node (issue 41): a paced drain against an unpaced one.
#
# Two `weir serve` nodes, A and B (1 worker each, the same routes: native
# /echo, drain_timeout 10 s). weir-load's failover mode opens -c
# connections to A (from --sources loopback addresses) and prints
# FAILOVER_READY; then A gets SIGTERM. Every connection A closes answers
# the close and reconnects at once to B, as a client without back-off
# would (the worst case the pacing is for); weir-load times each 101 from
# B and reports the peak reconnects B answered in any 100 ms (× 10: per
# second) and in any 1 s, and how long the closes took. Paced: both nodes
# run WEIR_BIN (this build: closes in slices over drain_timeout). Unpaced:
# both run WEIR_BASE_BIN (a build from before the paced drain, e.g. main's:
# every connection closed at once). The modes alternate (paced first, then
# unpaced, …) for --runs rounds; each cell is the median.
#
# Usage: WEIR_BASE_BIN=/path/to/old/weir benches/drain.sh [-c 10000]
#                            [--sources 8] [--runs 3] [--drain-timeout 10s]
# Environment: CARGO_TARGET_DIR (weir and weir-load built in release),
# WEIR_BIN (default $CARGO_TARGET_DIR/release/weir), WEIR_LOAD.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
target="${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}"
weir="${WEIR_BIN:-$target/release/weir}"
base="${WEIR_BASE_BIN:-}"
load="${WEIR_LOAD:-$target/release/weir-load}"
conns=10000 sources=8 runs=3 drain_timeout=10s
while [ $# -gt 0 ]; do
  case "$1" in
    -c) conns="$2"; shift 2 ;;
    --sources) sources="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --drain-timeout) drain_timeout="$2"; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$weir" ] && [ -x "$load" ] || { echo "build first: cargo build --release -p weir -p weir-load" >&2; exit 1; }
[ -n "$base" ] && [ -x "$base" ] || { echo "set WEIR_BASE_BIN to a weir build without the paced drain (the unpaced peer)" >&2; exit 1; }
# Copies: a rebuild during the run cannot swap the binaries under it.
dir="$(mktemp -d /tmp/weir-drain.XXXXXX)"
cp "$weir" "$dir/weir-paced"; cp "$base" "$dir/weir-unpaced"; cp "$load" "$dir/weir-load"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
ulimit -n "$(ulimit -Hn)"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
wait_port() {
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done
  echo "nothing listens on $1" >&2; return 1
}
cat >"$dir/routes.toml" <<TOML
[server]
workers = 1
drain_timeout = "$drain_timeout"

[[route]]
path = "/echo"
native = "echo"
TOML

# One round: prints weir-load's RESULT line.
round() {
  local bin="$dir/weir-$1" aport bport apid bpid lpid
  aport="$(free_port)"; bport="$(free_port)"
  RUST_LOG=warn "$bin" serve "$dir/routes.toml" --listen "127.0.0.1:$aport" >"$dir/a.log" 2>&1 &
  apid=$!; pids+=("$apid")
  RUST_LOG=warn "$bin" serve "$dir/routes.toml" --listen "127.0.0.1:$bport" >"$dir/b.log" 2>&1 &
  bpid=$!; pids+=("$bpid")
  wait_port "$aport"; wait_port "$bport"
  "$dir/weir-load" failover --url "ws://127.0.0.1:$aport/echo" \
    --failover-url "ws://127.0.0.1:$bport/echo" -c "$conns" --sources "$sources" -T 4 \
    --duration 60s >"$dir/load.out" 2>&1 &
  lpid=$!; pids+=("$lpid")
  for _ in $(seq 1200); do
    grep -q '^FAILOVER_READY' "$dir/load.out" && break
    kill -0 "$lpid" 2>/dev/null || break
    sleep 0.1
  done
  grep -q '^FAILOVER_READY' "$dir/load.out" || { cat "$dir/load.out" >&2; return 1; }
  sleep 1
  kill -TERM "$apid"
  wait "$lpid" || true
  wait "$apid" 2>/dev/null || true
  kill "$bpid" 2>/dev/null || true; wait "$bpid" 2>/dev/null || true
  grep '^RESULT ' "$dir/load.out" | sed 's/^RESULT //' || { cat "$dir/load.out" >&2; return 1; }
}

results="$dir/results"
: >"$results"
for r in $(seq "$runs"); do
  for mode in paced unpaced; do
    line="$(round "$mode")"
    echo "run $r $mode: $line" >&2
    echo "$mode $line" >>"$results"
  done
done

python3 - "$results" "$conns" "$drain_timeout" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    mode, js = line.split(" ", 1)
    rows.setdefault(mode, []).append(json.loads(js))
print(f"\n{sys.argv[2]} connections drained from node A (drain_timeout {sys.argv[3]}), each reconnecting at once to node B; medians of {len(rows['paced'])} runs (min–max)\n")
print("| drain | close codes | closes spread over | peak reconnects/s at B (busiest 100 ms × 10) | peak reconnects in any 1 s | all reconnected within | ok |")
print("|---|---|---|---|---|---|---|")
def cell(rs, key, unit=""):
    v = [r[key] for r in rs]
    return f"{statistics.median(v):,.0f}{unit} ({min(v):,}–{max(v):,})"
for mode in ("paced", "unpaced"):
    rs = rows[mode]
    codes = ", ".join(sorted({f"{c}×{n}" for r in rs[:1] for c, n in r["close_codes"].items()}))
    ok = all(r["ok"] for r in rs)
    print(f"| {mode} | {codes} | {cell(rs, 'closes_span_ms', ' ms')} | {cell(rs, 'peak_per_s_100ms')} | {cell(rs, 'peak_per_1s')} | {cell(rs, 'reconnects_span_ms', ' ms')} | {ok} |")
p = statistics.median(r["peak_per_s_100ms"] for r in rows["paced"])
u = statistics.median(r["peak_per_s_100ms"] for r in rows["unpaced"])
print(f"\npeak reconnect rate, paced ÷ unpaced: {p / u:.2f}")
PY
