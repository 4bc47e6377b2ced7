#!/usr/bin/env bash
# benches/pusher.sh — issue 38's Pusher benchmarks: weir's `pusher` route
# against sockudo (benches/peers/sockudo.sh installs it at a pinned
# version) and, with --servers weir,sockudo,soketi, soketi (peers/soketi.sh),
# the same client (weir-load's pusher-* modes) against each:
#   fanout   one event triggered through the signed HTTP API
#            (POST /apps/{id}/events) into -c subscribers of one channel,
#            -p events ahead of the slowest: server CPU per delivered event
#   client   --members members of one presence channel each sending client
#            events to the others: server CPU per client event sent
#   idle     --idle connections each subscribed to a channel of 100:
#            server RSS growth per connection (a fresh server each time)
#   storm    --storm connected clients subscribe to one presence channel at
#            once: wall time and server CPU until every client knows every
#            member (a fresh server each time)
# Each in two setups: "memory" (weir alone; sockudo's local adapter) and
# "redis" (weir with [cluster] on Redis; sockudo's Redis adapter and cache;
# soketi's Redis adapter),
# one Redis started here on a free port. Every delivery is verified by the
# client; a run with a loss or an error counts as failed.
#
# Each run measures every server once per scenario, in an order that
# alternates between runs; the table gives medians over runs and the
# per-run ratio weir ÷ each peer (median, and its range). Servers (and Redis)
# on CPU 0, weir-load on CPU 1; server CPU is utime+stime from /proc.
#
# Usage: benches/pusher.sh [--runs 5] [-c 1000] [-p 16] [-s 64] [--members 100]
#                          [--idle 10000] [--storm 5000] [--warmup 2s] [--duration 4s]
#                          [--no-redis] [--only fanout,client,idle,storm]
#                          [--heavy-runs 3] [--storm-cap 90s] [--servers weir,sockudo]
#                          [--client-window 4]
# --client-window: client events a member sends ahead of the slowest other
# member. Each receiver then has (members − 1) × this in flight: sockudo
# drops what does not fit its per-socket buffer of 1,000 messages (at 16,
# 1,584 in flight, it lost events), so the default keeps it at 396.
# --heavy-runs: runs of idle and storm (the longest scenarios; the first
# runs of the loop); --storm-cap: how long a storm may take before the
# clients that do not yet know every member count as failed.
# Environment: CARGO_TARGET_DIR (weir and weir-load built in release; sockudo
# installed by benches/peers/sockudo.sh under it), SOCKUDO_BIN to override,
# PUSHER_RAW=FILE to keep the raw results.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
target="${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}"
weir="${WEIR_BIN:-$target/release/weir}"
load="${WEIR_LOAD:-$target/release/weir-load}"
sockudo="${SOCKUDO_BIN:-$target/sockudo-bin/bin/sockudo}"
soketi="${SOKETI_DIR:-$target/soketi}/node_modules/@soketi/soketi/bin/server.js"
servers="weir,sockudo"
runs=5 conns=1000 window=16 size=64 members=100 idle=10000 storm=5000
warmup=2s duration=4s redis=1 only="fanout,client,idle,storm" heavy_runs=3 storm_cap=90s client_window=4
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    -c) conns="$2"; shift 2 ;;
    -p) window="$2"; shift 2 ;;
    -s) size="$2"; shift 2 ;;
    --members) members="$2"; shift 2 ;;
    --idle) idle="$2"; shift 2 ;;
    --storm) storm="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --duration) duration="$2"; shift 2 ;;
    --no-redis) redis=0; shift ;;
    --only) only="$2"; shift 2 ;;
    --heavy-runs) heavy_runs="$2"; shift 2 ;;
    --storm-cap) storm_cap="$2"; shift 2 ;;
    --servers) servers="$2"; shift 2 ;;
    --client-window) client_window="$2"; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$weir" ] && [ -x "$load" ] || { echo "build first: cargo build --release -p weir -p weir-load" >&2; exit 1; }
IFS=, read -r -a server_list <<<"$servers"
for s in "${server_list[@]}"; do
  case "$s" in
    weir) ;;
    sockudo) [ -x "$sockudo" ] || { echo "no sockudo at $sockudo: run benches/peers/sockudo.sh" >&2; exit 1; } ;;
    soketi) [ -f "$soketi" ] || { echo "no soketi at $soketi: run benches/peers/soketi.sh" >&2; exit 1; } ;;
    *) echo "unknown server $s (weir, sockudo, soketi)" >&2; exit 2 ;;
  esac
done

dir="$(mktemp -d /tmp/weir-pusher-bench.XXXXXX)"
raw="$dir/raw.jsonl"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
# The app every server serves: the secret from the environment (a fixed
# throwaway one if unset: the servers only ever listen on loopback).
export PUSHER_APP_SECRET="${PUSHER_APP_SECRET:-bench-secret-0123456789abcdef}"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
wait_port() {
  for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done
  echo "nothing listens on $1" >&2; return 1
}

# weir_config FILE [REDIS_PORT]
weir_config() {
  cat >"$1" <<TOML
[server]
workers = 1

[[route]]
path = "/app/{key}"
native = "pusher"

[[route.apps]]
id = "bench"
key = "bench-key"
secret_env = "PUSHER_APP_SECRET"
client_events = true
client_events_per_second = 1000000
max_presence_members = 20000
TOML
  if [ -n "${2:-}" ]; then printf '\n[cluster]\nredis = "redis://127.0.0.1:%s"\n' "$2" >>"$1"; fi
}

# sockudo_config FILE PORT [REDIS_PORT]: the same app; no rate limiter (on by
# default: 100 API calls a minute), no metrics listener, no queue (no
# webhooks configured, as on weir); limits raised as on weir. Its
# per-socket send buffer stays at its default (1,000 messages: its
# capacity is allocated with each connection, so 100,000 costs ~9 MB a
# connection).
sockudo_config() {
  local adapter=local cache=memory
  if [ -n "${3:-}" ]; then adapter=redis cache=redis; fi
  cat >"$1" <<TOML
host = "127.0.0.1"
port = $2
debug = false
shutdown_grace_period = 0

[app_manager]
driver = "memory"

[[app_manager.array.apps]]
id = "bench"
key = "bench-key"
secret = "\${PUSHER_APP_SECRET}"
enabled = true
enable_client_messages = true
max_connections = 1000000
max_client_events_per_second = 1000000
max_presence_members_per_channel = 20000

[adapter]
driver = "$adapter"

[cache]
driver = "$cache"

[queue]
driver = "none"

[rate_limiter]
enabled = false

[metrics]
enabled = false

[presence]
max_members_per_channel = 20000

[database.redis]
host = "127.0.0.1"
port = ${3:-6379}
TOML
}

# start SERVER SETUP: a fresh server on CPU 0; sets port and pid.
start() {
  port="$(free_port)"
  local rp=""
  [ "$2" = redis ] && rp="$rport"
  case "$1" in
    weir)
      weir_config "$dir/weir-$2.toml" "$rp"
      taskset -c 0 "$weir" serve "$dir/weir-$2.toml" --listen "127.0.0.1:$port" >>"$dir/weir.log" 2>&1 &
      ;;
    sockudo)
      sockudo_config "$dir/sockudo-$2.toml" "$port" "$rp"
      ( cd "$dir" && exec taskset -c 0 "$sockudo" --config "$dir/sockudo-$2.toml" ) >>"$dir/sockudo.log" 2>&1 &
      ;;
    soketi)
      # The same app and limits through its environment; its /usage and
      # metrics listener on a port of its own.
      ( export SOKETI_HOST=127.0.0.1 SOKETI_PORT="$port" SOKETI_METRICS_SERVER_PORT="$(free_port)" \
          SOKETI_DEFAULT_APP_ID=bench SOKETI_DEFAULT_APP_KEY=bench-key \
          SOKETI_DEFAULT_APP_SECRET="$PUSHER_APP_SECRET" SOKETI_DEFAULT_APP_ENABLE_CLIENT_MESSAGES=true \
          SOKETI_PRESENCE_MAX_MEMBERS=20000
        if [ -n "$rp" ]; then
          export SOKETI_ADAPTER_DRIVER=redis SOKETI_DB_REDIS_HOST=127.0.0.1 SOKETI_DB_REDIS_PORT="$rp"
        fi
        exec taskset -c 0 node "$soketi" start ) >>"$dir/soketi.log" 2>&1 &
      ;;
  esac
  pid=$!; pids+=("$pid")
  wait_port "$port"
  sleep 0.5
}
stop() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }

# measure SERVER SETUP SCENARIO MODE ARGS...: one weir-load run against the
# running server; its RESULT line appended to the raw file.
measure() {
  local server="$1" setup="$2" scenario="$3"; shift 3
  local line
  line="$(taskset -c 1 "$load" "$@" --url "ws://127.0.0.1:$port" --pin 1 --server-pid "$pid" \
          2>>"$dir/load.log" | tee -a "$dir/load.log" | grep '^RESULT ' | sed 's/^RESULT //')" || true
  python3 - "$server" "$setup" "$scenario" "$run" "$line" >>"$raw" <<'PY'
import json, sys
server, setup, scenario, run, line = sys.argv[1:6]
r = json.loads(line) if line else {"ok": False}
r.update(server=server, setup=setup, scenario=scenario, run=int(run))
print(json.dumps(r))
fig = {"fanout": ("server_cpu_ns_per_msg", "ns/delivery"), "client": ("server_cpu_ns_per_client_event", "ns/client event"),
       "idle": ("bytes_per_conn", "bytes/conn"), "storm": ("server_cpu_s", "s CPU")}[scenario]
print(f"  {setup:<7} {scenario:<7} {server:<8} {r.get(fig[0]) or 0:>12,.1f} {fig[1]}  {'ok' if r.get('ok') else 'FAILED ' + str(r.get('errors', ''))[:200]}",
      file=sys.stderr)
PY
}

wants() { [[ ",$only," == *",$1,"* ]]; }

setups=(memory)
if [ "$redis" = 1 ]; then
  bash "$root/scripts/redis.sh" >/dev/null
  rport="$(free_port)"
  taskset -c 0 redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" >"$dir/redis.log" 2>&1 &
  pids+=("$!")
  wait_port "$rport"
  setups+=(redis)
fi

echo "servers $servers; sockudo $("$sockudo" --version 2>/dev/null | head -1 || echo '?'); $runs runs; fanout -c $conns -p $window -s $size; client events: $members members -p $client_window; idle $idle; storm $storm"
for run in $(seq "$runs"); do
  # Rotate the order by one server per run.
  k=$(( (run - 1) % ${#server_list[@]} ))
  order=("${server_list[@]:k}" "${server_list[@]:0:k}")
  for setup in "${setups[@]}"; do
    echo "run $run ($setup)" >&2
    for server in "${order[@]}"; do
      if wants fanout || wants client; then
        start "$server" "$setup"
        wants fanout && measure "$server" "$setup" fanout pusher-fanout -c "$conns" -p "$window" -s "$size" \
          --warmup "$warmup" --duration "$duration" --channel "bench-$run"
        wants client && measure "$server" "$setup" client pusher-client-events -c "$members" -p "$client_window" -s "$size" \
          --warmup "$warmup" --duration "$duration" --channel "presence-ce-$run"
        stop
      fi
      if wants idle && [ "$run" -le "$heavy_runs" ]; then
        start "$server" "$setup"
        measure "$server" "$setup" idle pusher-idle -c "$idle" --room-size 100 --warmup 2s --channel "idle-$run"
        stop
      fi
      if wants storm && [ "$run" -le "$heavy_runs" ]; then
        start "$server" "$setup"
        measure "$server" "$setup" storm pusher-storm -c "$storm" --duration "$storm_cap" --channel "presence-storm-$run"
        stop
      fi
    done
  done
done

python3 "$here/pusher-table.py" "$raw"
# PUSHER_RAW=FILE keeps the raw results (one JSON line per measurement).
if [ -n "${PUSHER_RAW:-}" ]; then cp "$raw" "$PUSHER_RAW"; fi
