#!/usr/bin/env bash
# benches/profile.sh — where a server's CPU per message goes: user space (the
# server's own code) against system (the kernel, mostly loopback TCP).
#
# For each round (server order alternating: forward, reversed, ...) every
# server is started fresh, pinned to CPU 0 (weir-load on CPU 1), warmed up and
# measured under one weir-load scenario. weir-load gives the server's total
# CPU per message over its measured window (utime+stime from /proc/PID/stat).
# The split into user and system:
#   - /proc: utime and stime of /proc/PID/stat read by this script at the
#     start and the end of the window (a 10% margin inside it). These are
#     clock ticks (10 ms) charged to whatever mode the server was in at the
#     tick: at these loads the server uses ~0.1 s of CPU per second, so a
#     4 s window holds ~40 ticks and the user share (~15%) is ±35%.
#   - perf (default when `perf` runs here): a second fresh run of the same
#     server right after, under `perf record` (cpu-clock samples at --freq
#     Hz, default 10000) over the same window: the share of user-space
#     samples (thousands per window, a few % error) times the total of the
#     run without perf (sampling costs the server CPU of its own, charged as
#     system time, so the total under perf is not used). The table uses
#     this split when it is there.
#   - system calls (on by default when perf can count tracepoints here):
#     during the perf run, `perf stat` counts the server's system calls
#     (raw_syscalls:sys_enter) and among them the waits (epoll_wait,
#     epoll_pwait, io_uring_enter), reads (read, recvfrom, recvmsg) and
#     writes (write, writev, sendto, sendmsg) over the same window, divided
#     by the messages weir-load counted in it (its rate × the window).
#     --no-syscalls turns it off; without perf it is not measured.
# Printed per server: medians over rounds of user, system and total µs/msg,
# system calls per message,
# and the medians of per-round ratios (other ÷ first server); then, from
# the last round's samples, the top user-space symbols of each server.
#
# Usage: benches/profile.sh [options]
#   --servers LIST    comma list of: weir, weir-base, uws-cpp (default weir,weir-base,uws-cpp;
#                     the ones not built are skipped with a note)
#   --load ARGS       weir-load arguments (default "echo -c 200 -p 8 -s 64");
#                     the path goes in --path
#   --path PATH       default /echo (uws-cpp serves /echo and /relay only)
#   --workers N       weir --workers and uws-cpp threads (default 1; all on the
#                     CPUs of SERVER_CPUS, default 0, weir-load on CPU 1)
#   --rounds N        default 3
#   --warmup D --duration D   default 1s / 4s (whole seconds)
#   --perf | --no-perf   perf sampling (default: when perf works)
#   --freq HZ         perf sampling frequency (default 10000)
#   --top N           symbols in the perf report (default 25)
#   --no-syscalls     no system call counts
# Environment: as compare.sh (CARGO_TARGET_DIR, WEIR_BIN, WEIR_ROUTES,
# WEIR_BASE_BIN, WEIR_BASE_ROUTES, WEIR_IO and WEIR_BASE_IO (`weir serve
# --io`), WEIR_LOAD, UWS_CPP_BIN).
# Example: the issue-25 split at 64 B × 50 × 1:
#   WEIR_ROUTES=/tmp/r.toml WEIR_BASE_BIN=/path/weir-base bash benches/profile.sh \
#     --load "echo -c 50 -p 1 -s 64" --rounds 5
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
target="${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}"
load="${WEIR_LOAD:-$target/release/weir-load}"
weir_bin="${WEIR_BIN:-$target/release/weir}"
weir_routes="${WEIR_ROUTES:-$root/examples/routes.toml}"
weir_base_bin="${WEIR_BASE_BIN:-}"
weir_base_routes="${WEIR_BASE_ROUTES:-$weir_routes}"
uws_cpp_bin="${UWS_CPP_BIN:-$target/uws-cpp/uws-cpp}"
server_cpus="${SERVER_CPUS:-0}"

servers="weir,weir-base,uws-cpp"
load_args="echo -c 200 -p 8 -s 64"
path=/echo
workers=1
rounds=3
warmup=1
duration=4
perf_on=auto
syscalls_on=1
freq=10000
top=25
while [ $# -gt 0 ]; do
  case "$1" in
    --servers) servers="$2"; shift 2 ;;
    --load) load_args="$2"; shift 2 ;;
    --path) path="$2"; shift 2 ;;
    --workers) workers="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --warmup) warmup="${2%s}"; shift 2 ;;
    --duration) duration="${2%s}"; shift 2 ;;
    --perf) perf_on=1; shift ;;
    --no-syscalls) syscalls_on=0; shift ;;
    --no-perf) perf_on=0; shift ;;
    --top) top="$2"; shift 2 ;;
    --freq) freq="$2"; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$load" ] || { echo "build weir-load first: cargo build --release -p weir-load" >&2; exit 1; }
if [ "$perf_on" = auto ]; then
  perf_on=0
  command -v perf >/dev/null && perf stat -e cpu-clock -o /dev/null -- true >/dev/null 2>&1 && perf_on=1
fi
# The system calls counted, as perf's tracepoints: all, then by kind.
syscall_events=(raw_syscalls:sys_enter
  syscalls:sys_enter_epoll_wait syscalls:sys_enter_epoll_pwait syscalls:sys_enter_io_uring_enter
  syscalls:sys_enter_read syscalls:sys_enter_recvfrom syscalls:sys_enter_recvmsg
  syscalls:sys_enter_write syscalls:sys_enter_writev syscalls:sys_enter_sendto syscalls:sys_enter_sendmsg)
if [ "$perf_on" != 1 ] || ! perf stat -x, $(printf -- '-e %s ' "${syscall_events[@]}") -o /dev/null -- true >/dev/null 2>&1; then
  syscalls_on=0
fi

list=()
IFS=, read -r -a wanted <<< "$servers"
for s in "${wanted[@]}"; do
  case "$s" in
    weir) [ -x "$weir_bin" ] && list+=(weir) || echo "skipping weir: $weir_bin not built" >&2 ;;
    weir-base) [ -n "$weir_base_bin" ] && [ -x "$weir_base_bin" ] && list+=(weir-base) \
                 || echo "skipping weir-base: set WEIR_BASE_BIN to a weir binary" >&2 ;;
    uws-cpp) [ -x "$uws_cpp_bin" ] && list+=(uws-cpp) \
               || echo "skipping uws-cpp: $uws_cpp_bin not built (UWS_CPP_SRC=... bash benches/peers/build-uws-cpp.sh)" >&2 ;;
    *) echo "unknown server $s (weir, weir-base, uws-cpp)" >&2; exit 2 ;;
  esac
done
[ ${#list[@]} -gt 0 ] || { echo "no server to profile" >&2; exit 1; }
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

work="$(mktemp -d /tmp/weir-profile.XXXXXX)"
raw="$work/raw.jsonl"
log="$work/log"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start_server() {
  local name="$1" port="$2"
  case "$name" in
    weir) taskset -c "$server_cpus" "$weir_bin" serve "$weir_routes" --listen "127.0.0.1:$port" --workers "$workers" ${WEIR_IO:+--io "$WEIR_IO"} >>"$log" 2>&1 & ;;
    weir-base) taskset -c "$server_cpus" "$weir_base_bin" serve "$weir_base_routes" --listen "127.0.0.1:$port" --workers "$workers" ${WEIR_BASE_IO:+--io "$WEIR_BASE_IO"} >>"$log" 2>&1 & ;;
    uws-cpp) taskset -c "$server_cpus" "$uws_cpp_bin" "$port" "$workers" >>"$log" 2>&1 & ;;
  esac
  server_pid=$!
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    kill -0 "$server_pid" 2>/dev/null || { echo "$name exited at start (see $log)" >&2; server_pid=""; return 1; }
    sleep 0.1
  done
  echo "$name did not listen on $port within 10s" >&2; return 1
}

stop_server() {
  [ -n "$server_pid" ] || return 0
  kill "$server_pid" 2>/dev/null || true
  for _ in $(seq 30); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}

# utime stime (clock ticks) of the server, all threads.
ticks() { awk '{ sub(/^.*\) /, ""); print $12, $13 }' "/proc/$1/stat"; }

read -r -a largs <<< "$load_args"
mode="${largs[0]}"; largs=("${largs[@]:1}")

# once SERVER PERF: one fresh server under the load, /proc ticks read at the
# window's ends (and perf sampling between them when PERF is 1); sets
# once_out (weir-load's RESULT), once_ticks and once_user (user share of
# perf's samples, or null).
once() {
  local srv="$1" with_perf="$2" port a b
  once_out='{"ok":false}'; once_ticks='"0 0","0 0"'; once_user=null; once_calls=null
  # The measured window starts after the connections are up and the warmup
  # is over; a 10% margin of the window on each side keeps the sample in it.
  # (Sleeps computed before the load starts: python3 can take 0.5 s to start
  # on a busy machine.)
  local lead inside
  lead="$(awk -v w="$warmup" -v d="$duration" 'BEGIN { printf "%.2f", w + 0.3 + d * 0.1 }')"
  inside="$(awk -v d="$duration" 'BEGIN { printf "%.2f", d * 0.8 - 0.3 }')"
  port="$(free_port)"
  start_server "$srv" "$port" || { stop_server; return; }
  taskset -c 1 "$load" "$mode" --url "ws://127.0.0.1:$port$path" "${largs[@]}" \
    --warmup "${warmup}s" --duration "${duration}s" --server-pid "$server_pid" >"$work/load.out" 2>>"$log" &
  local lpid=$!
  sleep "$lead"
  a="$(ticks "$server_pid")"
  if [ "$with_perf" = 1 ]; then
    rm -f "$work/$srv.perf" "$work/$srv.calls"
    local spid=
    if [ "$syscalls_on" = 1 ]; then
      perf stat -x, $(printf -- '-e %s ' "${syscall_events[@]}") -p "$server_pid" \
        -o "$work/$srv.calls" -- sleep "$inside" >>"$log" 2>&1 &
      spid=$!
    fi
    perf record -q -e cpu-clock -F "$freq" -p "$server_pid" -o "$work/$srv.perf" -- \
      sleep "$inside" >>"$log" 2>&1 || true
    [ -z "$spid" ] || wait "$spid" || true
  else
    sleep "$inside"
  fi
  b="$(ticks "$server_pid")"
  wait "$lpid" || true
  stop_server
  once_out="$(grep '^RESULT ' "$work/load.out" | tail -n1 | sed 's/^RESULT //')"
  [ -n "$once_out" ] || once_out='{"ok":false}'
  once_ticks="\"$a\",\"$b\""
  if [ "$with_perf" = 1 ] && [ -s "$work/$srv.calls" ]; then
    # {"all": n, "wait": n, "read": n, "write": n, "secs": window} (counts
    # over the window; divided by messages in the report).
    once_calls="$(awk -F, -v secs="$inside" '
      $3 ~ /raw_syscalls:sys_enter/ { all = $1 }
      $3 ~ /epoll_wait|epoll_pwait|io_uring_enter/ { wait += $1 }
      $3 ~ /sys_enter_(read|recvfrom|recvmsg)$/ { rd += $1 }
      $3 ~ /sys_enter_(write|writev|sendto|sendmsg)$/ { wr += $1 }
      END { printf "{\"all\":%d,\"wait\":%d,\"read\":%d,\"write\":%d,\"secs\":%s}", all, wait, rd, wr, secs }' \
      "$work/$srv.calls")"
  fi
  if [ "$with_perf" = 1 ] && [ -f "$work/$srv.perf" ]; then
    # Samples in user space ([.]) and in the kernel ([k]), by symbol.
    once_user="$(perf report -q -i "$work/$srv.perf" --no-children --sort sym -F overhead,sym 2>/dev/null \
      | awk '/\[\.\]/ { sub(/%/, "", $1); u += $1 } /\[k\]/ { sub(/%/, "", $1); k += $1 }
             END { if (u + k > 0) printf "%.5f", u / (u + k); else print "null" }')"
  fi
}

# run SERVER ROUND: the total and /proc ticks from a run without perf
# (sampling at 10 kHz costs the server CPU of its own, charged as system
# time), then, with perf, the user share from a second fresh run; a JSON
# line into $raw.
run() {
  local srv="$1" round="$2" out ticks user=null perf_r=null calls=null
  once "$srv" 0
  out="$once_out"; ticks="$once_ticks"
  if [ "$perf_on" = 1 ]; then
    once "$srv" 1
    user="$once_user"; perf_r="$once_out"; calls="$once_calls"
  fi
  echo "{\"server\":\"$srv\",\"round\":$round,\"ticks\":[$ticks],\"perf_user\":$user,\"r\":$out,\"under_perf\":$perf_r,\"calls\":$calls}" >>"$raw"
  python3 - "$raw" <<'PY'
import json, sys
x = json.loads(open(sys.argv[1]).read().splitlines()[-1])
r = x["r"]
if not r.get("ok"):
    print(f"  {x['server']:<10} round {x['round']}: FAILED"); sys.exit()
(u0, s0), (u1, s1) = [map(int, t.split()) for t in x["ticks"]]
du, ds = u1 - u0, s1 - s0
tot = r["server_cpu_ns_per_msg"] / 1000
share = du / (du + ds) if du + ds else 0
pu = x["perf_user"]
up = (x.get("under_perf") or {}).get("server_cpu_ns_per_msg")
perf = "" if pu is None else (f", perf: user {tot * pu:.3f}, system {tot * (1 - pu):.3f}"
                              f" (share of samples {pu:.3f}; total under perf {up / 1000 if up else 0:.3f})")
c, upr = x.get("calls"), x.get("under_perf") or {}
calls = ""
if c and upr.get("msgs_per_s"):
    n = upr["msgs_per_s"] * c["secs"]
    calls = (f"; system calls per message {c['all'] / n:.2f} (waits {c['wait'] / n:.3f},"
             f" reads {c['read'] / n:.2f}, writes {c['write'] / n:.2f})")
print(f"  {x['server']:<10} round {x['round']}: {r['msgs_per_s']:,.0f} msg/s, total {tot:.3f} µs/msg; "
      f"/proc: user {tot * share:.3f}, system {tot * (1 - share):.3f} ({du}+{ds} ticks){perf}{calls}")
PY
}

echo "servers: ${list[*]}  load: $mode $path ${largs[*]}  workers: $workers  rounds: $rounds  window: ${warmup}s + ${duration}s  perf: $perf_on"
echo "work dir: $work"
for round in $(seq "$rounds"); do
  order=("${list[@]}")
  if [ $((round % 2)) -eq 0 ]; then
    order=(); for ((i=${#list[@]}-1; i>=0; i--)); do order+=("${list[i]}"); done
  fi
  for srv in "${order[@]}"; do run "$srv" "$round"; done
done

echo
python3 - "$raw" "${list[0]}" <<'PY'
import json, sys, statistics
raw, first = sys.argv[1], sys.argv[2]
rows = [json.loads(l) for l in open(raw) if l.strip()]
split = {}   # (server, round) -> (user, sys, total) µs/msg
calls = {}   # server -> [(all, wait, read, write) per message, a round each]
order = []
src = "/proc ticks"
for x in rows:
    if not x["r"].get("ok"):
        continue
    (u0, s0), (u1, s1) = [map(int, t.split()) for t in x["ticks"]]
    du, ds = u1 - u0, s1 - s0
    tot = x["r"]["server_cpu_ns_per_msg"] / 1000
    share = x["perf_user"]
    if share is None:
        share = du / (du + ds) if du + ds else 0
    else:
        src = "perf samples"
    split[(x["server"], x["round"])] = (tot * share, tot * (1 - share), tot)
    c, upr = x.get("calls"), x.get("under_perf") or {}
    if c and upr.get("msgs_per_s"):
        n = upr["msgs_per_s"] * c["secs"]
        calls.setdefault(x["server"], []).append(tuple(c[k] / n for k in ("all", "wait", "read", "write")))
    if x["server"] not in order:
        order.append(x["server"])
med = lambda v: statistics.median(v) if v else None
f = lambda v, d=3: "–" if v is None else f"{v:.{d}f}"
print(f"user/system split from {src}; total from /proc (weir-load)")
print(f"| server | rounds | user µs/msg | system µs/msg | total µs/msg | user ÷ {first} | total ÷ {first} | system calls/msg (waits, reads, writes) |")
print("|---|---|---|---|---|---|---|---|")
for s in order:
    mine = [v for (srv, _), v in split.items() if srv == s]
    ru, rt = [], []
    for (srv, rnd), v in split.items():
        b = split.get((first, rnd))
        if srv == s and b and b[0] and b[2]:
            ru.append(v[0] / b[0]); rt.append(v[2] / b[2])
    cs = calls.get(s, [])
    sc = "–" if not cs else (f"{med([c[0] for c in cs]):.2f} ({med([c[1] for c in cs]):.3f},"
                             f" {med([c[2] for c in cs]):.2f}, {med([c[3] for c in cs]):.2f})")
    print(f"| {s} | {len(mine)} | {f(med([v[0] for v in mine]))} | {f(med([v[1] for v in mine]))} | "
          f"{f(med([v[2] for v in mine]))} | {f(med(ru), 2)} | {f(med(rt), 2)} | {sc} |")
PY

if [ "$perf_on" = 1 ]; then
  for srv in "${list[@]}"; do
    [ -f "$work/$srv.perf" ] || continue
    echo
    echo "== $srv (round $rounds): top $top user-space symbols, % of all the server's cpu-clock samples"
    perf report -q -i "$work/$srv.perf" --no-children --sort dso,sym --percent-limit 0.2 2>/dev/null \
      | grep -v '\[k\]' | grep -E '^ *[0-9]' | head -n "$top"
    perf report -q -i "$work/$srv.perf" --no-children --sort dso 2>/dev/null \
      | grep -E '^ *[0-9]' | head -n 6 | sed 's/^/   dso: /'
  done
fi
