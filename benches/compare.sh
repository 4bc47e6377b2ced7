#!/usr/bin/env bash
# benches/compare.sh — end-to-end comparison of weir with peer servers.
#
# One server at a time, pinned to CPU 0 (taskset); weir-load pinned to CPU 1.
# Every measurement starts a fresh server, warms up, then measures; the
# server order alternates between runs (forward, reversed, forward ...), and
# each cell is the median of --runs runs. Ratios baseline/peer (throughput
# and server CPU per message) are computed within each run, then the median
# of those ratios is reported. Every reply is verified by weir-load: a run
# with a mismatch is reported as FAILED, never as a number.
#
# Usage: benches/compare.sh [options]
#   --servers LIST     comma list of: weir,weir-base,uws,uws-cpp,bun,fastws,tungstenite,ws,deno
#                      (default: weir if its binary exists, then all peers);
#                      uws-cpp is C++ uWebSockets (peers/build-uws-cpp.sh,
#                      UWS_CPP_BIN), /echo and /relay only, skipped with a
#                      note when it is not built;
#                      weir-base is a second weir build (WEIR_BASE_BIN), to
#                      compare two builds in one run: --servers weir,weir-base
#   --scenarios LIST   comma list (default: the quick set); `all` for every one;
#                      scenarios on other paths than /echo and /relay (`fanout`,
#                      `plain64x200p8`, `json200p8`, `guest`: /echo vs /plain,
#                      /json, /binary, and `langs`: /echo vs /plain and /json
#                      in Rust, JS (/js/...) and Python (/py/...) at 64 B ×
#                      200 × 8) run against weir and weir-base only;
#                      the `pubsub*` and `rooms10` scenarios (/topic/...,
#                      native pubsub; rooms10: 1,000 connections in chat
#                      rooms of 10, every member publishing)
#                      also against uws and bun (ws.subscribe / ws.publish);
#                      the `deflate*` scenarios (weir-load deflate: echo of
#                      JSON-like text with permessage-deflate) run weir's
#                      /zecho (takeover) and /zecho-none routes
#                      (benches/deflate/routes.toml) against uws (shared and
#                      dedicated compressor), bun and ws with perMessageDeflate;
#                      `deflatepub` (weir-load deflate-fanout) weir's /zpub
#                      against uws and bun publishing compressed;
#                      the `wss*` scenarios (wss://: echo, handshake cost)
#                      against weir with `[server] tls`, uws as uWS.SSLApp
#                      and bun with Bun.serve's tls, with a throwaway
#                      certificate made here (openssl); `h2` (weir only):
#                      echo over HTTP/1.1 vs over HTTP/2 streams (RFC 8441),
#                      h2c and TLS
#   --runs N           runs per scenario (default 3)
#   --warmup D --duration D   per measurement (default 1s / 2s)
#   --baseline NAME    ratios are NAME/peer (default weir, else the first server)
#   --out FILE         also write the markdown table to FILE
#   --list             print the scenarios and exit
#   --table RAW        only print the table of an earlier run's raw results
# Environment: CARGO_TARGET_DIR (where weir, weir-load and the Rust peers are
# built, default ~/.cache/weir-target), WEIR_LOAD (default
# $CARGO_TARGET_DIR/release/weir-load), PEERS_TARGET (where the Rust peers
# were built, default CARGO_TARGET_DIR), WEIR_BIN (default
# $CARGO_TARGET_DIR/release/weir), WEIR_ROUTES (routes file for weir; the
# `guest` scenario needs one with /plain, /json and /binary, default
# examples/routes.toml), WEIR_BASE_BIN and WEIR_BASE_ROUTES (the same for
# weir-base; WEIR_BASE_ROUTES defaults to WEIR_ROUTES: set it when the two
# builds need guests built for different ABIs), WEIR_IO and WEIR_BASE_IO
# (`weir serve --io`: tasks or epoll, e.g. one binary as both servers,
# WEIR_BASE_BIN=$WEIR_BIN WEIR_BASE_IO=epoll, to compare the two loops).
set -euo pipefail

# Run from a private copy: bash reads a script as it goes, so editing this
# file during a long run would otherwise corrupt the run.
if [ -z "${WEIR_COMPARE_HERE:-}" ]; then
  copy="$(mktemp /tmp/weir-compare-script.XXXXXX)"
  cp "$0" "$copy"
  WEIR_COMPARE_HERE="$(cd "$(dirname "$0")" && pwd)" WEIR_COMPARE_COPY="$copy" exec bash "$copy" "$@"
fi
here="$WEIR_COMPARE_HERE"
root="$(cd "$here/.." && pwd)"
target="${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}"
export CARGO_TARGET_DIR="$target"
load="${WEIR_LOAD:-$target/release/weir-load}"
weir_bin="${WEIR_BIN:-$target/release/weir}"
weir_routes="${WEIR_ROUTES:-$root/examples/routes.toml}"
weir_base_bin="${WEIR_BASE_BIN:-}"
weir_base_routes="${WEIR_BASE_ROUTES:-$weir_routes}"

# name | mode | path | weir-load arguments
scenario_defs=(
  "echo64x50|echo|/echo|-c 50 -p 1 -s 64"
  "echo64x200p8|echo|/echo|-c 200 -p 8 -s 64"
  "size1k|echo|/echo|-c 16 -p 1 -s 1KiB"
  "size4k|echo|/echo|-c 16 -p 1 -s 4KiB"
  "size16k|echo|/echo|-c 16 -p 1 -s 16KiB"
  "size64k|echo|/echo|-c 16 -p 1 -s 64KiB"
  "size128k|echo|/echo|-c 16 -p 1 -s 128KiB"
  "size256k|echo|/echo|-c 16 -p 1 -s 256KiB"
  "size1m|echo|/echo|-c 16 -p 1 -s 1MiB"
  "size2m|echo|/echo|-c 16 -p 1 -s 2MiB"
  "relay16|relay|/relay|-c 64 -s 16"
  "relay4k|relay|/relay|-c 64 -s 4KiB"
  "pingpong|relay|/relay|-c 1 -s 16"
  "connect|connect|/echo|-c 32"
  "idle10k|idle|/echo|-c 10000"
  "idle19k|idle|/echo|-c 19000 --sources 8"
  "chatidle19k|idle|/chat/room-{room}|-c 19000 --sources 8 --room-size 10"
  "heartbeat19k|heartbeat|/echo|-c 19000 --sources 8"
  "storm19k|storm|/echo|-c 19000 --sources 8"
  "fanout|fanout|/chat/bench|-c 100 -s 64 -p 32"
  "pubsub100|fanout|/topic/bench|-c 100 -s 64 -p 32"
  "pubsub1k|fanout|/topic/bench|-c 1000 -s 64 -p 32"
  "pubsub10k|fanout|/topic/bench|-c 10000 -s 64 -p 32"
  "pubsub100x1k|fanout|/topic/bench|-c 100 -s 1KiB -p 32"
  "pubsub1kx1k|fanout|/topic/bench|-c 1000 -s 1KiB -p 32"
  "pubsub10kx1k|fanout|/topic/bench|-c 10000 -s 1KiB -p 32"
  "rooms10|rooms|/topic/room-{room}|-c 1000 --room-size 10 -p 4 -s 64"
  "plain64x200p8|echo|/plain|-c 200 -p 8 -s 64"
  "json200p8|json|/json|-c 200 -p 8 --async"
  "plain64x50|echo|/plain|-c 50 -p 1 -s 64"
  "json50|json|/json|-c 50 --sync"
  "guest|guest|-|-"
  "deflate1k|deflate|/zecho|-c 50 -p 4 -s 1KiB"
  "deflate16k|deflate|/zecho|-c 16 -p 2 -s 16KiB"
  "deflatepub|deflate-fanout|/zpub/bench|-c 100 -p 8 -s 1KiB"
  "langs|langs|-|-"
  "wss64x200p8|echo|wss:/echo|-c 200 -p 8 -s 64"
  "wss64k|echo|wss:/echo|-c 16 -p 1 -s 64KiB"
  "wssconnect|connect|wss:/echo|-c 32"
  "h2|h2|-|-"
)
quick="echo64x50,echo64x200p8,size16k,size1m,relay16,pingpong,connect"

servers=""
scenarios="$quick"
runs=3
warmup=1s
duration=2s
baseline=""
out=""
from=""
while [ $# -gt 0 ]; do
  case "$1" in
    --servers) servers="$2"; shift 2 ;;
    --scenarios) scenarios="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --duration) duration="$2"; shift 2 ;;
    --baseline) baseline="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --table) from="$2"; shift 2 ;;
    --list) printf '%s\n' "${scenario_defs[@]}"; echo "quick: $quick"; exit 0 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$here/compare.sh"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
if [ "$scenarios" = all ]; then
  scenarios="$(printf '%s\n' "${scenario_defs[@]}" | cut -d'|' -f1 | paste -sd,)"
fi
if [ -z "$servers" ]; then
  servers="uws,uws-cpp,bun,fastws,tungstenite,ws,deno"
  [ -x "$weir_bin" ] && servers="weir,$servers"
fi
# The C++ uWebSockets peer is built by hand from sources outside the
# repository (peers/build-uws-cpp.sh): without it, run the rest.
uws_cpp_bin="${UWS_CPP_BIN:-$target/uws-cpp/uws-cpp}"
export UWS_CPP_BIN="$uws_cpp_bin"
if [[ ",$servers," == *",uws-cpp,"* ]] && [ ! -x "$uws_cpp_bin" ]; then
  echo "skipping uws-cpp: $uws_cpp_bin not built (UWS_CPP_SRC=... bash benches/peers/build-uws-cpp.sh)" >&2
  servers="$(echo ",$servers," | sed 's/,uws-cpp,/,/; s/^,//; s/,$//')"
fi
IFS=, read -r -a server_list <<< "$servers"
IFS=, read -r -a scenario_list <<< "$scenarios"
if [ -z "$baseline" ] && [ -n "$from" ]; then
  # Tabulating an earlier run: weir is the baseline if that run measured it,
  # whether or not a weir binary is here now.
  grep -q '"server":"weir' "$from" && baseline=weir
fi
[ -n "$baseline" ] || { [[ ",$servers," == *",weir,"* ]] && baseline=weir || baseline="${server_list[0]}"; }

[ -x "$load" ] || { echo "build weir-load first: cargo build --release -p weir-load" >&2; exit 1; }
if [ -z "$from" ] && [[ ",$servers," == *",weir-base,"* ]] && [ ! -x "$weir_base_bin" ]; then
  echo "weir-base needs WEIR_BASE_BIN (a weir binary)" >&2; exit 2
fi
# The servers that can serve weir's own routes (guests, the chat room).
weir_servers=()
for s in "${server_list[@]}"; do
  case "$s" in weir|weir-base) weir_servers+=("$s") ;; esac
done
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# TLS (wss scenarios, h2): a throwaway self-signed certificate for
# 127.0.0.1 made for this run (its key never leaves the temporary
# directory), weir's routes file beside it, weir-load told to trust it.
tls_dir=""
server_tls=0     # 1: start the next server with TLS
url_scheme=ws
tls_args=()
if [ -z "$from" ] && [[ ",$scenarios," == *",wss"* || ",$scenarios," == *",h2,"* ]]; then
  command -v openssl >/dev/null || { echo "the wss and h2 scenarios need openssl (apt-get install openssl)" >&2; exit 2; }
  tls_dir="$(mktemp -d /tmp/weir-compare-tls.XXXXXX)"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -keyout "$tls_dir/key.pem" -out "$tls_dir/cert.pem" -subj /CN=localhost \
    -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -addext "basicConstraints=critical,CA:FALSE" \
    -addext "keyUsage=digitalSignature" -addext "extendedKeyUsage=serverAuth" 2>/dev/null
  cat > "$tls_dir/routes.toml" <<'TOML'
# weir's native routes over TLS, for benches/compare.sh (made per run).
[server]
max_message = "64MiB"
tls = { cert = "cert.pem", key = "key.pem" }

[[route]]
path = "/echo"
native = "echo"

[[route]]
path = "/relay"
native = "relay"
TOML
fi

raw="$(mktemp /tmp/weir-compare.XXXXXX.jsonl)"
log="${raw%.jsonl}.log"
server_pid=""
cleanup() {
  rm -f "${WEIR_COMPARE_COPY:-}"
  [ -z "$tls_dir" ] || rm -rf "$tls_dir"
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_server NAME PORT: starts it on CPU 0, sets server_pid, waits for the port.
start_server() {
  local name="$1" port="$2"
  if [ "$name" = weir ] || [ "$name" = weir-base ]; then
    local bin="$weir_bin" routes="$weir_routes" file=()
    [ "$name" = weir-base ] && { bin="$weir_base_bin"; routes="$weir_base_routes"; }
    [ -n "${routes_now:-}" ] && routes="$routes_now"
    [ "$server_tls" = 1 ] && routes="$tls_dir/routes.toml"
    [ -f "$routes" ] && file=("$routes")
    local io="${WEIR_IO:-}" io_arg=()
    [ "$name" = weir-base ] && io="${WEIR_BASE_IO:-}"
    [ -n "$io" ] && io_arg=(--io "$io")
    taskset -c 0 "$bin" serve "${file[@]}" --listen "127.0.0.1:$port" --workers 1 "${io_arg[@]}" >>"$log" 2>&1 &
  elif [ "$server_tls" = 1 ]; then
    TLS_CERT="$tls_dir/cert.pem" TLS_KEY="$tls_dir/key.pem" \
      taskset -c 0 "$here/peers/run.sh" "$name-tls" "$port" >>"$log" 2>&1 &
  else
    taskset -c 0 "$here/peers/run.sh" "$name" "$port" >>"$log" 2>&1 &
  fi
  server_pid=$!
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    kill -0 "$server_pid" 2>/dev/null || { echo "$name exited at start (see $log)" >&2; server_pid=""; return 1; }
    sleep 0.1
  done
  echo "$name did not listen on $port within 10s" >&2
  return 1
}

stop_server() {
  [ -n "$server_pid" ] || return 0
  kill "$server_pid" 2>/dev/null || true
  for _ in $(seq 30); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}

# measure SCENARIO SERVER RUN LABEL MODE PATH ARGS...: one measurement, appended to $raw.
measure() {
  local scen="$1" srv="$2" run="$3" label="$4" mode="$5" path="$6"; shift 6
  local port line
  port="$(free_port)"
  if ! start_server "$srv" "$port"; then
    echo "{\"scenario\":\"$scen\",\"server\":\"$label\",\"run\":$run,\"r\":{\"ok\":false,\"error\":\"start\"}}" >>"$raw"
    stop_server; return
  fi
  line="$(taskset -c 1 "$load" "$mode" --url "$url_scheme://127.0.0.1:$port$path" "${tls_args[@]}" "$@" \
          --warmup "$warmup" --duration "$duration" --server-pid "$server_pid" 2>>"$log" \
          | tee -a "$log" | grep '^RESULT ' | tail -n1 | sed 's/^RESULT //')" || true
  stop_server
  [ -n "$line" ] || line='{"ok":false,"error":"no result"}'
  echo "{\"scenario\":\"$scen\",\"server\":\"$label\",\"run\":$run,\"args\":\"$mode $path $*\",\"r\":$line}" >>"$raw"
  printf '  %-14s %-22s run %s: %s\n' "$scen" "$label" "$run" \
    "$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print("FAILED" if not r.get("ok") else "%s msg/s, server %s ns/msg, rss/conn %s" % (r.get("msgs_per_s"), r.get("server_cpu_ns_per_msg"), r.get("bytes_per_conn")))' "$line")"
}

make_table() {
  python3 - "$1" "$2" <<'PY'
import json, sys, statistics
from collections import defaultdict, OrderedDict
raw, base = sys.argv[1], sys.argv[2]
rows = [json.loads(l) for l in open(raw) if l.strip()]
by = OrderedDict()          # (scenario, server) -> list of results
runs = defaultdict(dict)    # (scenario, run) -> server -> result
for x in rows:
    key = (x["scenario"], x["server"])
    by.setdefault(key, []).append(x["r"])
    runs[(x["scenario"], x["run"])][x["server"]] = x["r"]

def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None

def fmt(v, digits=0):
    if v is None: return "–"
    if digits == 0: return f"{v:,.0f}"
    return f"{v:.{digits}f}"

def base_of(srv):
    # "weir-base /plain guest" is compared with "weir /plain guest".
    return base + srv[len(srv.split(" ")[0]):]

def ratio(scen, srv, field):
    # baseline/peer within the same run; the median of those ratios.
    rs = []
    b_srv = base_of(srv)
    if b_srv == srv: return None   # a baseline row other than the baseline itself
    for (s, run), res in runs.items():
        if s != scen or srv not in res or b_srv not in res: continue
        a, b = res[b_srv], res[srv]
        if not (a.get("ok") and b.get("ok")): continue
        va, vb = a.get(field), b.get(field)
        if va and vb: rs.append(va / vb)
    return med(rs)

print("| scenario | server | ok runs | msg/s (median) | server CPU ns/msg | client CPU ns/msg | p50 µs | p99 µs | %s/peer msg/s | %s/peer CPU/msg |" % (base, base))
print("|---|---|---|---|---|---|---|---|---|---|")
for (scen, srv), rs in by.items():
    if any(str(r.get("mode")).startswith("deflate") for r in rs):
        continue
    ok = [r for r in rs if r.get("ok")]
    n_ok = f"{len(ok)}/{len(rs)}"
    if not ok:
        print(f"| {scen} | {srv} | {n_ok} | FAILED | | | | | | |"); continue
    if ok[0].get("mode") == "idle":
        b = med([r.get("bytes_per_conn") for r in ok])
        print(f"| {scen} | {srv} | {n_ok} | RSS/conn {fmt(b)} B | | | | | | |"); continue
    g = lambda f: med([r.get(f) for r in ok])
    same = srv == base
    print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        scen, srv, n_ok, fmt(g("msgs_per_s")), fmt(g("server_cpu_ns_per_msg")), fmt(g("client_cpu_ns_per_msg")),
        fmt(g("p50_us"), 1), fmt(g("p99_us"), 1),
        "1.00" if same else fmt(ratio(scen, srv, "msgs_per_s"), 2),
        "1.00" if same else fmt(ratio(scen, srv, "server_cpu_ns_per_msg"), 2)))

# The deflate scenarios: bytes on the wire per message each way, the
# compression ratio (payload / bytes to the client), and server CPU per
# message as weir/peer within each run (weir none against peers that keep
# no context, weir takeover against those that do), the median over runs.
deflate = [(k, rs) for k, rs in by.items() if any(str(r.get("mode")).startswith("deflate") for r in rs)]
if deflate:
    print()
    print("| scenario | server | agreed | ok runs | msg/s | server CPU ns/msg | wire B/msg to server | wire B/msg to client | ratio | %s CPU/msg ÷ this (per run, median) |" % base)
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (scen, srv), rs in deflate:
        ok = [r for r in rs if r.get("ok")]
        if not ok:
            print(f"| {scen} | {srv} | | 0/{len(rs)} | FAILED | | | | | | |"); continue
        g = lambda f: med([r.get(f) for r in ok])
        ratio_wire = g("payload_per_msg") / g("wire_to_client_per_msg") if g("wire_to_client_per_msg") else None
        agreed = ok[0].get("agreed", "").replace("server_no_context=", "s:").replace(" client_no_context=", " c:")
        def vs(label):
            rs2 = []
            for (s, run), res in runs.items():
                if s != scen or label not in res or srv not in res: continue
                a, b = res[label], res[srv]
                if a.get("ok") and b.get("ok"):
                    rs2.append(a["server_cpu_ns_per_msg"] / b["server_cpu_ns_per_msg"])
            return med(rs2)
        mine = [k[1] for k, _ in deflate if k[0] == scen and k[1].split(" ")[0] == base]
        cmp = "" if srv.split(" ")[0] == base else ", ".join(
            f"{m[len(base) + 1:]} {fmt(vs(m), 2)}" for m in mine)
        print(f"| {scen} | {srv} | {agreed} | {len(ok)}/{len(rs)} | {fmt(g('msgs_per_s'))} | {fmt(g('server_cpu_ns_per_msg'))} | {fmt(g('wire_to_server_per_msg'))} | {fmt(g('wire_to_client_per_msg'))} | {fmt(ratio_wire, 2)} | {cmp} |")

# The langs scenario: each route against native /echo of the same server in
# the same run (route/native msg/s; native/route CPU per message, so both
# read "fraction of native"), the median over runs.
native = {}
for (s, run), res in runs.items():
    if s != "langs": continue
    for srv, r in res.items():
        if srv.endswith(" /echo native") and r.get("ok"):
            native[(run, srv.split(" ")[0])] = r
if native:
    print()
    print("| langs: route | runs | msg/s ÷ native /echo | native /echo CPU/msg ÷ route CPU/msg |")
    print("|---|---|---|---|")
    for (scen, srv), rs in by.items():
        if scen != "langs" or srv.endswith(" /echo native"): continue
        tput, cpu = [], []
        for (s, run), res in runs.items():
            if s != "langs" or srv not in res: continue
            n, r = native.get((run, srv.split(" ")[0])), res[srv]
            if not (n and r.get("ok")): continue
            tput.append(r["msgs_per_s"] / n["msgs_per_s"])
            cpu.append(n["server_cpu_ns_per_msg"] / r["server_cpu_ns_per_msg"])
        print(f"| {srv} | {len(cpu)} | {fmt(med(tput), 2)} | {fmt(med(cpu), 2)} |")

# The h2 scenario: each HTTP/2 row against HTTP/1.1 of the same server and
# scheme (h2c against ws://, h2 over TLS against wss://) in the same run.
h1 = {}
for (s, run), res in runs.items():
    if s != "h2": continue
    for srv, r in res.items():
        if srv.endswith("HTTP/1.1") and r.get("ok"):
            h1[(run, srv)] = r
if h1:
    print()
    print("| h2: transport | runs | msg/s ÷ HTTP/1.1 | server CPU/msg ÷ HTTP/1.1 |")
    print("|---|---|---|---|")
    for (scen, srv), rs in by.items():
        if scen != "h2" or srv.endswith("HTTP/1.1"): continue
        name = srv.split(" ")[0]
        ref = f"{name} wss:// HTTP/1.1" if " TLS " in srv else f"{name} ws:// HTTP/1.1"
        tput, cpu = [], []
        for (s, run), res in runs.items():
            if s != "h2" or srv not in res: continue
            b, r = h1.get((run, ref)), res[srv]
            if not (b and r.get("ok")): continue
            tput.append(r["msgs_per_s"] / b["msgs_per_s"])
            cpu.append(r["server_cpu_ns_per_msg"] / b["server_cpu_ns_per_msg"])
        print(f"| {srv} vs {ref.split(' ', 1)[1]} | {len(cpu)} | {fmt(med(tput), 2)} | {fmt(med(cpu), 2)} |")
PY
}

if [ -n "$from" ]; then
  rm -f "$raw" "$log"
  make_table "$from" "$baseline"
  exit 0
fi

echo "servers: ${server_list[*]}  baseline: $baseline  scenarios: ${scenario_list[*]}  runs: $runs"
echo "raw results: $raw  server/loader log: $log"
start_time=$(date +%s)
for scen in "${scenario_list[@]}"; do
  def="$(printf '%s\n' "${scenario_defs[@]}" | grep "^$scen|" || true)"
  [ -n "$def" ] || { echo "unknown scenario $scen (see --list)" >&2; exit 2; }
  IFS='|' read -r _ mode path args <<< "$def"
  read -r -a argv <<< "$args"
  server_tls=0; url_scheme=ws; tls_args=()
  routes_now=""; unset IDLE_TIMEOUT
  if [ "$mode" = heartbeat ]; then
    # Every server pings its idle connections after 8 s of silence: weir's
    # idle_timeout (benches/heartbeat-routes.toml), uWS.js idleTimeout with
    # sendPingsAutomatically, Bun idleTimeout with sendPings. Run it with
    # --warmup 10s --duration 16s or more, so every connection is pinged.
    export IDLE_TIMEOUT=8
    routes_now="$here/heartbeat-routes.toml"
  fi
  if [ "$mode" = storm ]; then
    # 19,000 clients connect at once; every server listens with a backlog
    # of 512 (uSockets' fixed value; weir's benches/storm-routes.toml).
    routes_now="$here/storm-routes.toml"
  fi
  if [[ "$path" == wss:* ]]; then
    path="${path#wss:}"
    server_tls=1; url_scheme=wss; tls_args=(--ca "$tls_dir/cert.pem")
  fi
  for run in $(seq "$runs"); do
    order=("${server_list[@]}")
    if [ $((run % 2)) -eq 0 ]; then
      order=(); for ((i=${#server_list[@]}-1; i>=0; i--)); do order+=("${server_list[i]}"); done
    fi
    if [ "$mode" = deflate ] || [ "$mode" = deflate-fanout ]; then
      :
    elif [ "$server_tls" = 1 ]; then
      # wss: weir and the peers with TLS of their own.
      keep=()
      for srv in "${order[@]}"; do
        case "$srv" in weir|weir-base|uws|bun) keep+=("$srv") ;; esac
      done
      order=("${keep[@]}")
    elif [[ "$path" == /topic/* ]]; then
      # Native pubsub: weir and the peers with a pub/sub API of their own.
      keep=()
      for srv in "${order[@]}"; do
        case "$srv" in weir|weir-base|uws|bun) keep+=("$srv") ;; esac
      done
      order=("${keep[@]}")
    elif [ "$path" != /echo ] && [ "$path" != /relay ]; then
      # Guest routes and the chat room are weir's; the peers only serve
      # /echo and /relay.
      [ ${#weir_servers[@]} -gt 0 ] || { echo "$scen scenario needs weir or weir-base" >&2; continue; }
      order=()
      for srv in "${weir_servers[@]}"; do order+=("$srv"); done
      if [ $((run % 2)) -eq 0 ]; then
        order=(); for ((i=${#weir_servers[@]}-1; i>=0; i--)); do order+=("${weir_servers[i]}"); done
      fi
    fi
    if [ "$mode" = langs ]; then
      # Within weir: native echo vs the same handlers in each guest
      # language, at the load of the guest targets (64 B × 200 × 8).
      for srv in "${order[@]}"; do
        measure "$scen" "$srv" "$run" "$srv /echo native" echo /echo -c 200 -p 8 -s 64
        for p in /plain /js/plain /py/plain; do
          measure "$scen" "$srv" "$run" "$srv $p" echo "$p" -c 200 -p 8 -s 64
        done
        for p in /json /js/json /py/json; do
          measure "$scen" "$srv" "$run" "$srv $p" json "$p" -c 200 -p 8 --async
        done
      done
      continue
    fi
    if [ "$mode" = deflate-fanout ]; then
      # Compressed fan-out: weir's /zpub ("none": one compressed copy per
      # publish) against uws (shared compressor) and bun.
      routes_now="$here/deflate/routes.toml"
      for srv in "${order[@]}"; do
        case "$srv" in
          weir|weir-base)
            measure "$scen" "$srv" "$run" "$srv none" "$mode" "$path" "${argv[@]}"
            measure "$scen" "$srv" "$run" "$srv none L5" "$mode" "${path/zpub/zpub-l5}" "${argv[@]}" ;;
          uws|bun) measure "$scen" "$srv" "$run" "$srv" "$mode" "$path" "${argv[@]}" ;;
        esac
      done
      routes_now=""
      continue
    fi
    if [ "$mode" = deflate ]; then
      # Compressed echo: weir with and without context takeover against
      # the peers that speak permessage-deflate.
      routes_now="$here/deflate/routes.toml"
      for srv in "${order[@]}"; do
        case "$srv" in
          weir|weir-base)
            measure "$scen" "$srv" "$run" "$srv takeover" deflate /zecho "${argv[@]}"
            measure "$scen" "$srv" "$run" "$srv none" deflate /zecho-none "${argv[@]}"
            measure "$scen" "$srv" "$run" "$srv takeover L2" deflate /zecho-l2 "${argv[@]}"
            measure "$scen" "$srv" "$run" "$srv none L5" deflate /zecho-none-l5 "${argv[@]}" ;;
          uws)
            measure "$scen" "$srv" "$run" "uws shared" deflate /zecho "${argv[@]}"
            measure "$scen" "$srv" "$run" "uws dedicated" deflate /zecho-dedicated "${argv[@]}" ;;
          bun|ws) measure "$scen" "$srv" "$run" "$srv" deflate /zecho "${argv[@]}" ;;
        esac
      done
      routes_now=""
      continue
    fi
    if [ "$mode" = h2 ]; then
      # Within weir: the same echo load (64 B × 200 × 8) over HTTP/1.1 and
      # over HTTP/2 streams, h2c and TLS (ALPN h2).
      for srv in "${order[@]}"; do
        server_tls=0; url_scheme=ws; tls_args=()
        measure "$scen" "$srv" "$run" "$srv ws:// HTTP/1.1" echo /echo -c 200 -p 8 -s 64
        measure "$scen" "$srv" "$run" "$srv h2c 100 streams/conn" echo /echo -c 200 -p 8 -s 64 --h2 --streams 100
        measure "$scen" "$srv" "$run" "$srv h2c 1 stream/conn" echo /echo -c 200 -p 8 -s 64 --h2 --streams 1
        server_tls=1; url_scheme=wss; tls_args=(--ca "$tls_dir/cert.pem")
        measure "$scen" "$srv" "$run" "$srv wss:// HTTP/1.1" echo /echo -c 200 -p 8 -s 64
        measure "$scen" "$srv" "$run" "$srv h2 TLS 100 streams/conn" echo /echo -c 200 -p 8 -s 64 --h2 --streams 100
      done
      continue
    fi
    if [ "$mode" = guest ]; then
      # Within weir: native echo vs guest routes at equal load.
      for srv in "${order[@]}"; do
        measure "$scen" "$srv" "$run" "$srv /echo native" echo /echo -c 64 -s 16 --text
        measure "$scen" "$srv" "$run" "$srv /plain guest" echo /plain -c 64 -s 16 --text
        measure "$scen" "$srv" "$run" "$srv /json sync" json /json -c 64 --sync
        measure "$scen" "$srv" "$run" "$srv /json async" json /json -c 128 --async
        measure "$scen" "$srv" "$run" "$srv /binary sync" binary /binary -c 64 --sync
        measure "$scen" "$srv" "$run" "$srv /binary async" binary /binary -c 128 --async
      done
      continue
    fi
    for srv in "${order[@]}"; do
      measure "$scen" "$srv" "$run" "$srv" "$mode" "$path" "${argv[@]}"
    done
  done
done
echo "took $(( $(date +%s) - start_time ))s"

table="$(make_table "$raw" "$baseline")"
echo
echo "$table"
if [ -n "$out" ]; then
  { echo "<!-- $(date -u +%FT%TZ) servers=$servers scenarios=$scenarios runs=$runs warmup=$warmup duration=$duration -->"; echo "$table"; } > "$out"
  echo "table written to $out"
fi
