#!/usr/bin/env bash
# Where a proxy's CPU per proxied message goes: system calls by kind per
# message, and user against system CPU, for weir's proxy, nginx and HAProxy
# in front of the same upstream (the setup of benches/proxy.sh: the proxy
# alone on CPU 0, the upstream and weir-load on CPU 1).
#
#   bash benches/proxy-syscalls.sh [--runs N] [--warmup 1s] [--duration 4s]
#        [--load "-c 200 -p 8 -s 64"] [--servers weir,nginx,haproxy] [--no-build]
#
# Server weir-base: another weir binary as the proxy (WEIR_BASE_BIN), for a
# before/after in the same run.
#
# Each round runs every proxy twice under the same weir-load scenario
# (servers alternating, order reversed every other round):
#   - counts: `perf stat` on the syscalls:sys_enter_* tracepoints of the
#     proxy process (all threads) over the middle of the measured window,
#     divided by the echoes completed in it (weir-load's msg/s × the
#     window). One echo is two forwards each way through the proxy.
#   - CPU: a second run without perf; utime and stime of /proc/PID/stat
#     over the same part of the window (10 ms ticks: a few % spread over
#     4 s at these loads), and weir-load's total per message.
# Prints medians over rounds. Needs perf with tracepoint access (root or
# perf_event_paranoid ≤ -1).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"

runs=3
warmup=1
duration=4
load_args="-c 200 -p 8 -s 64"
servers="weir,nginx,haproxy"
build=1
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --warmup) warmup="${2%s}"; shift 2 ;;
    --duration) duration="${2%s}"; shift 2 ;;
    --load) load_args="$2"; shift 2 ;;
    --servers) servers="$2"; shift 2 ;;
    --no-build) build=0; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
command -v perf >/dev/null || { echo "proxy-syscalls.sh needs perf" >&2; exit 1; }
nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"
haproxy_bin="$(command -v haproxy || echo /usr/sbin/haproxy)"

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}"
[ "$build" = 0 ] || (cd "$root" && cargo build --release -q -p weir -p weir-load)
weir="${WEIR_BIN:-$CARGO_TARGET_DIR/release/weir}"
load="$CARGO_TARGET_DIR/release/weir-load"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

work="$(mktemp -d /tmp/weir-proxy-syscalls.XXXXXX)"
log="$work/log"
raw="$work/raw.jsonl"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
wait_port() {
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "nothing listens on $1 (see $log)" >&2
  exit 1
}
fill() {
  sed -e "s|@PORT@|$2|g" -e "s|@UPSTREAM@|127.0.0.1:$up_port|g" -e "s|@DIR@|$work|g" "$here/proxy/$1" >"$work/$1"
}

up_port="$(free_port)"
taskset -c 1 "$weir" serve "$here/proxy/weir-upstream.toml" --listen "127.0.0.1:$up_port" >>"$log" 2>&1 &
pids+=($!)
wait_port "$up_port"

declare -A port pid
IFS=, read -r -a list <<<"$servers"
for srv in "${list[@]}"; do
  port[$srv]="$(free_port)"
  case "$srv" in
    weir|weir-base)
      bin="$weir"
      [ "$srv" = weir ] || bin="${WEIR_BASE_BIN:?weir-base needs WEIR_BASE_BIN}"
      fill weir-proxy.toml "${port[$srv]}"
      taskset -c 0 "$bin" serve "$work/weir-proxy.toml" --listen "127.0.0.1:${port[$srv]}" >>"$log" 2>&1 &
      pids+=($!); pid[$srv]=$! ;;
    nginx)
      mkdir -p "$work/client_body" "$work/proxy" "$work/fastcgi" "$work/uwsgi" "$work/scgi"
      fill nginx.conf "${port[$srv]}"
      taskset -c 0 "$nginx_bin" -c "$work/nginx.conf" -p "$work" -e "$work/nginx-error.log" >>"$log" 2>&1 &
      pids+=($!) ;;
    haproxy)
      fill haproxy.cfg "${port[$srv]}"
      taskset -c 0 "$haproxy_bin" -db -f "$work/haproxy.cfg" >>"$log" 2>&1 &
      pids+=($!); pid[$srv]=$! ;;
    *) echo "unknown server $srv (weir, weir-base, nginx, haproxy)" >&2; exit 2 ;;
  esac
done
for srv in "${list[@]}"; do wait_port "${port[$srv]}"; done
# nginx's worker is the process doing the proxying.
[ -z "${port[nginx]:-}" ] || pid[nginx]="$(pgrep -P "$(cat "$work/nginx.pid")" | head -n1)"

events="raw_syscalls:sys_enter"
kinds="recvfrom sendto read write readv writev recvmsg sendmsg epoll_wait epoll_pwait epoll_ctl futex"
for k in $kinds; do events="$events,syscalls:sys_enter_$k"; done
# Packets the proxy's context puts on loopback (its sends, its ACKs, and
# what the receiving side answers inside the same softirq), and switches.
events="$events,net:net_dev_queue,sched:sched_switch"

ticks() { awk '{ sub(/^.*\) /, ""); print $12, $13 }' "/proc/$1/stat"; }
lead="$(awk -v w="$warmup" -v d="$duration" 'BEGIN { printf "%.2f", w + 0.3 + d * 0.1 }')"
inside="$(awk -v d="$duration" 'BEGIN { printf "%.2f", d * 0.8 - 0.3 }')"
read -r -a largs <<<"$load_args"

# once SERVER PERF: one weir-load run; over the window either perf stat
# (PERF=1) or the /proc ticks. Prints one JSON line.
once() {
  local srv="$1" with_perf="$2" a b lpid out
  taskset -c 1 "$load" echo --url "ws://127.0.0.1:${port[$srv]}/echo" "${largs[@]}" \
    --warmup "${warmup}s" --duration "${duration}s" --server-pid "${pid[$srv]}" >"$work/load.out" 2>>"$log" &
  lpid=$!
  sleep "$lead"
  a="$(ticks "${pid[$srv]}")"
  local t0 t1
  t0="$(date +%s.%N)"
  if [ "$with_perf" = 1 ]; then
    perf stat -x, -e "$events" -p "${pid[$srv]}" -o "$work/perf.csv" -- sleep "$inside" 2>>"$log" || true
  else
    sleep "$inside"
  fi
  t1="$(date +%s.%N)"
  b="$(ticks "${pid[$srv]}")"
  wait "$lpid" || true
  out="$(grep '^RESULT ' "$work/load.out" | tail -n1 | sed 's/^RESULT //')"
  [ -n "$out" ] || out='{"ok":false}'
  local counts="{}"
  if [ "$with_perf" = 1 ]; then
    counts="$(awk -F, '$1 ~ /^[0-9]+$/ { sub(/^(raw_)?syscalls:sys_enter_?/, "", $3); sub(/^net:net_dev_queue$/, "packets", $3); sub(/^sched:sched_switch$/, "switches", $3); if ($3 == "") $3 = "all"; printf "%s\"%s\":%s", sep, $3, $1; sep="," }
                       BEGIN { printf "{" } END { printf "}" }' "$work/perf.csv")"
  fi
  echo "{\"server\":\"$srv\",\"perf\":$with_perf,\"secs\":$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }'),\"ticks\":[\"$a\",\"$b\"],\"counts\":$counts,\"r\":$out}"
}

echo "load: $(uptime)"
echo "servers: ${list[*]}  weir-load echo ${largs[*]}  rounds: $runs  window: ${warmup}s + ${duration}s"
for run in $(seq "$runs"); do
  order=("${list[@]}")
  if [ $((run % 2)) -eq 0 ]; then
    order=(); for ((i=${#list[@]}-1; i>=0; i--)); do order+=("${list[i]}"); done
  fi
  for srv in "${order[@]}"; do
    for with_perf in 1 0; do
      line="$(once "$srv" "$with_perf")"
      echo "$line" >>"$raw"
      python3 -c 'import json,sys; x=json.loads(sys.argv[1]); r=x["r"]; print("  %-8s %s: %s %d msg/s" % (x["server"], "syscalls" if x["perf"] else "cpu     ", "ok" if r.get("ok") else "FAILED", r.get("msgs_per_s", 0)))' "$line"
    done
  done
done
echo "load: $(uptime)"

python3 - "$raw" "$kinds" <<'EOF'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
kinds = ["all"] + sys.argv[2].split() + ["packets", "switches"]
med = lambda v: statistics.median(v) if v else float("nan")
servers = list(dict.fromkeys(x["server"] for x in rows))
calls, cpu = {}, {}
for x in rows:
    r = x["r"]
    if not r.get("ok"):
        continue
    msgs = r["msgs_per_s"] * x["secs"]
    if x["perf"]:
        for k, n in x["counts"].items():
            calls.setdefault((x["server"], k), []).append(n / msgs)
    else:
        (u0, s0), (u1, s1) = [map(int, t.split()) for t in x["ticks"]]
        hz = 100
        cpu.setdefault((x["server"], "user"), []).append((u1 - u0) / hz / msgs * 1e9)
        cpu.setdefault((x["server"], "sys"), []).append((s1 - s0) / hz / msgs * 1e9)
        cpu.setdefault((x["server"], "total"), []).append(r["server_cpu_ns_per_msg"])
        cpu.setdefault((x["server"], "msgs"), []).append(r["msgs_per_s"])
shown = [k for k in kinds if any(med(calls.get((s, k), [])) >= 0.005 for s in servers)]
print()
print("System calls, loopback packets and context switches per echo (one echo: a message each way")
print("through the proxy), medians:")
print("| server | " + " | ".join(shown) + " |")
print("|---|" + "---|" * len(shown))
for s in servers:
    print("| %s | " % s + " | ".join("%.2f" % med(calls.get((s, k), [])) for k in shown) + " |")
print()
print("CPU per echo (ns; user and system from /proc ticks over the window, total from weir-load), medians:")
print("| server | msg/s | user | system | total | total ÷ nginx |")
print("|---|---|---|---|---|---|")
ng = med(cpu.get(("nginx", "total"), []))
for s in servers:
    t = med(cpu.get((s, "total"), []))
    print("| %s | %.0f | %.0f | %.0f | %.0f | %s |" % (
        s, med(cpu.get((s, "msgs"), [])), med(cpu.get((s, "user"), [])), med(cpu.get((s, "sys"), [])), t,
        "%.2fx" % (t / ng) if ng == ng else ""))
EOF
echo "raw results: $raw"
