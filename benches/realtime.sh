#!/usr/bin/env bash
# benches/realtime.sh — issue 37's real-time benchmarks: fan-out to C
# subscribers of one channel published through the server API
# (`POST /api/publish`, weir-load's api-fanout mode) against the same
# fan-out published by a WebSocket client (fanout mode, identical bytes:
# each message one JSON string), and the API publish into a namespace with
# history against one without; on one node, then on two nodes through Redis
# (published on node A, subscribers on node B). Each publisher runs twice:
# at saturation, -p messages ahead of the slowest subscriber (the
# WebSocket publisher's burst then arrives in one read and goes out as one
# delivery: one write per subscriber for many messages, where each API
# call is a delivery of its own), and paced at --rate messages per second
# (the paced WebSocket publisher wakes every millisecond, so at 1,000/s
# every message is its own delivery, as with the API: like for like).
# Ends with Redis memory per
# stored publication (MEMORY USAGE of the history stream ÷ XLEN).
#
# Subscribers are plain WebSocket clients on a `realtime = true` pubsub
# route (/rt/{topic}), every delivery verified (order, bytes). Each run
# measures every scenario once, in alternating order, on fresh channels;
# the table gives per-run ratios of server CPU per delivery against the
# peer of the same run ("÷ X": this row's over X's), median over runs.
# Server CPU is utime+stime from /proc/PID/stat over the measured window:
# the node's; across nodes A+B (Redis's own in a column of its own).
# Servers and Redis on CPU 0, weir-load on CPU 1.
#
# A fifth publisher, "api batch", POSTs /api/batch with --batch publishes
# per call (a backend's burst in one call, as the WebSocket publisher's
# burst arrives in one read).
#
# Usage: benches/realtime.sh [--runs 5] [-c 1000] [-s 64] [-p 64] [--rate 1000] [--batch 32]
#                            [--warmup 2s] [--duration 4s] [--no-cluster]
# Environment: CARGO_TARGET_DIR (weir and weir-load built in release).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
target="${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}"
weir="${WEIR_BIN:-$target/release/weir}"
load="${WEIR_LOAD:-$target/release/weir-load}"
runs=5 conns=1000 size=64 window=64 rate=1000 warmup=2s duration=4s cluster=1 batch=32
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    -c) conns="$2"; shift 2 ;;
    -s) size="$2"; shift 2 ;;
    -p) window="$2"; shift 2 ;;
    --rate) rate="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --duration) duration="$2"; shift 2 ;;
    --no-cluster) cluster=0; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$weir" ] && [ -x "$load" ] || { echo "build first: cargo build --release --workspace" >&2; exit 1; }

dir="$(mktemp -d /tmp/weir-realtime-bench.XXXXXX)"
raw="$dir/raw.jsonl"
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
export WEIR_API_KEY="bench-api-key-0123456789abcdef"

# routes FILE API_PORT [REDIS_PORT]
routes() {
  cat >"$1" <<TOML
[server]
workers = 1

[[route]]
path = "/rt/{topic}"
native = "pubsub"
realtime = true

[api]
listen = "127.0.0.1:$2"
key_env = "WEIR_API_KEY"

[[namespaces]]
name = "hist"
history_size = 1000
history_ttl = "5m"
TOML
  if [ -n "${3:-}" ]; then printf '\n[cluster]\nredis = "redis://127.0.0.1:%s"\n' "$3" >>"$1"; fi
}

# node NAME API_PORT [REDIS_PORT]: starts weir on CPU 0; sets port and pid.
node() {
  routes "$dir/$1.toml" "$2" "${3:-}"
  port="$(free_port)"
  taskset -c 0 "$weir" serve "$dir/$1.toml" --listen "127.0.0.1:$port" >"$dir/$1.log" 2>&1 &
  pid=$!; pids+=("$pid")
  wait_port "$port"; wait_port "$2"
}

# measure GROUP LABEL PIDS MODE ARGS...: one weir-load run, its RESULT line
# appended to the raw file with the group, label and run.
measure() {
  local group="$1" label="$2" pidlist="$3"; shift 3
  local line
  line="$(taskset -c 1 "$load" "$@" -c "$conns" -s "$size" -p "$window" --pin 1 \
          --warmup "$warmup" --duration "$duration" --server-pid "$pidlist" \
          2>>"$dir/load.log" | tee -a "$dir/load.log" | grep '^RESULT ' | sed 's/^RESULT //')" || true
  python3 - "$group" "$label" "$run" "$line" >>"$raw" <<'PY'
import json, sys
group, label, run, line = sys.argv[1:5]
r = json.loads(line) if line else {"ok": False}
r.update(group=group, label=label, run=int(run))
print(json.dumps(r))
state = "ok" if r.get("ok") else "FAILED"
print(f"  {group:<10} {label:<14} {r.get('msgs_per_s') or 0:>12,.0f} deliveries/s  "
      f"server {r.get('server_cpu_ns_per_msg') or 0:7.1f} ns/delivery  {state}", file=sys.stderr)
PY
}

# run_group GROUP PUB_BASE SUB_BASE API_ADDR PIDS: the three
# scenarios of one run, in an order that alternates between runs.
run_group() {
  local group="$1" pub_base="$2" sub_base="$3" api_addr="$4" pidlist="$5"
  local order=(ws api history batch wsr apir)
  [ $((run % 2)) -eq 0 ] && order=(apir wsr batch history api ws)
  for s in "${order[@]}"; do
    case "$s" in
      wsr) measure "$group" "ws paced" "$pidlist" fanout --json-string --rate "$rate" \
            --url "$pub_base/rt/wsr$run" --sub-url "$sub_base/rt/wsr$run" ;;
      apir) measure "$group" "api paced" "$pidlist" api-fanout --api "$api_addr" --rate "$rate" \
            --url "$sub_base/rt/apir$run" --channel "apir$run" ;;
      ws) measure "$group" "ws publish" "$pidlist" fanout --json-string \
            --url "$pub_base/rt/ws$run" --sub-url "$sub_base/rt/ws$run" ;;
      api) measure "$group" "api publish" "$pidlist" api-fanout --api "$api_addr" \
            --url "$sub_base/rt/api$run" --channel "api$run" ;;
      batch) measure "$group" "api batch" "$pidlist" api-fanout --api "$api_addr" --batch "$batch" \
            --url "$sub_base/rt/batch$run" --channel "batch$run" ;;
      history) measure "$group" "api+history" "$pidlist" api-fanout --api "$api_addr" \
            --url "$sub_base/rt/hist:h$run" --channel "hist:h$run" ;;
    esac
  done
}

echo "$conns subscribers, $size B messages, window $window, paced at $rate/s, $runs runs, warmup $warmup, measured $duration"
echo "raw results: $raw (removed at exit; the table is printed below)"

# One node.
api1="$(free_port)"
node single "$api1"
spid="$pid"; sport="$port"
for run in $(seq "$runs"); do
  echo "run $run (one node)" >&2
  run_group "one node" "ws://127.0.0.1:$sport" "ws://127.0.0.1:$sport" "127.0.0.1:$api1" "$spid"
done
kill "$spid"; wait "$spid" 2>/dev/null || true

redis_line=""
if [ "$cluster" = 1 ]; then
  bash "$root/scripts/redis.sh"
  rport="$(free_port)"
  taskset -c 0 redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" >"$dir/redis.log" 2>&1 &
  rpid=$!; pids+=("$rpid")
  wait_port "$rport"
  apia="$(free_port)"; node a "$apia" "$rport"; apid="$pid"; aport="$port"
  apib="$(free_port)"; node b "$apib" "$rport"; bpid="$pid"; bport="$port"
  for run in $(seq "$runs"); do
    echo "run $run (two nodes, Redis)" >&2
    run_group "two nodes" "ws://127.0.0.1:$aport" "ws://127.0.0.1:$bport" "127.0.0.1:$apia" "$apid,$bpid,$rpid"
  done
  # Redis memory per stored publication: the last history channel's stream.
  # The stream of channel hist:hN (weir escapes ':' in the hash tag).
  key="$(redis-cli -p "$rport" --scan --pattern "weir:rt:{hist*h$runs}:s" | head -1)"
  n="$(redis-cli -p "$rport" XLEN "$key")"
  bytes="$(redis-cli -p "$rport" MEMORY USAGE "$key" SAMPLES 0)"
  redis_line="$n $bytes"
fi

python3 - "$raw" "$size" "$redis_line" <<'PY'
import json, statistics, sys
raw, size, redis = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = [json.loads(l) for l in open(raw)]
med = lambda xs: statistics.median(xs) if xs else None
f = lambda x, d=0: "n/a" if x is None else f"{x:,.{d}f}"
by = {}
for r in rows:
    by.setdefault((r["group"], r["run"]), {})[r["label"]] = r
groups = list(dict.fromkeys(r["group"] for r in rows))
labels = ["ws publish", "api publish", "api+history", "api batch", "ws paced", "api paced"]
print()
print("| setup | publisher | ok runs | deliveries/s | server CPU ns/delivery | Redis ns/delivery | ÷ ws publish | ÷ ws paced | ÷ api publish |")
print("|---|---|---|---|---|---|---|---|---|")
for g in groups:
    for lab in labels:
        rs = [res[lab] for (gg, _), res in by.items() if gg == g and lab in res]
        ok = [r for r in rs if r.get("ok")]
        cpu = lambda r: r.get("server_cpu_ns_per_msg")
        # Across nodes the pids are A, B, Redis: the server figure is A+B.
        def nodes(r):
            each = r.get("cpu_ns_per_msg_by_pid")
            return sum(each[:2]) if each else cpu(r)
        def redis_ns(r):
            each = r.get("cpu_ns_per_msg_by_pid")
            return each[2] if each and len(each) > 2 else None
        def ratio(peer):
            xs = []
            for (gg, _), res in by.items():
                a, b = res.get(lab), res.get(peer)
                if gg == g and a and b and a.get("ok") and b.get("ok"):
                    xs.append(nodes(a) / nodes(b))
            return med(xs)
        rws = f(ratio("ws publish"), 2) if lab in ("api publish", "api+history", "api batch") else ""
        rws1 = f(ratio("ws paced"), 2) if lab == "api paced" else ""
        rapi = f(ratio("api publish"), 2) if lab == "api+history" else ""
        print(f"| {g} | {lab} | {len(ok)}/{len(rs)} | {f(med([r['msgs_per_s'] for r in ok]))} | "
              f"{f(med([nodes(r) for r in ok]), 1)} | {f(med([x for x in map(redis_ns, ok) if x is not None]), 1)} | {rws} | {rws1} | {rapi} |")
if redis:
    n, b = map(int, redis.split())
    print()
    print("| Redis history stream | entries | MEMORY USAGE bytes | bytes per stored publication | payload bytes |")
    print("|---|---|---|---|---|")
    print(f"| hist namespace (history_size 1000) | {n} | {b:,} | {f(b / n if n else None)} | {size} |")
PY
