#!/usr/bin/env bash
# weir's native proxy against nginx and HAProxy in front of the same
# upstream (weir's native echo on its own port), and the upstream reached
# directly. client -> proxy -> upstream echo -> proxy -> client; weir-load
# checks every byte and reports the proxy's CPU per message
# (--server-pid: the proxy process; nginx's one worker).
#
#   bash benches/proxy.sh [--runs N] [--warmup 2s] [--duration 5s] [--scenarios a,b] [--no-build]
#
# Scenarios: small8 (64 B x 200 conns x 8 in flight), small1 (64 B x 50 x 1:
# the latency case), large (64 KiB x 10 x 1). Each round runs every server
# once per scenario, alternating (direct, weir, nginx, haproxy). The proxy
# runs alone on CPU 0; the client and the upstream share CPU 1, the same for
# every proxy. Prints a markdown table: medians, proxy CPU per message,
# the ratio to nginx, and p99 added over direct.
# Installs nginx and haproxy from Debian when missing (apt-get).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"

runs=5
warmup=2s
duration=5s
scenarios="small8,small1,large"
build=1
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --duration) duration="$2"; shift 2 ;;
    --scenarios) scenarios="$2"; shift 2 ;;
    --no-build) build=0; shift ;;
    *) echo "usage: $0 [--runs N] [--warmup 2s] [--duration 5s] [--scenarios small8,small1,large]" >&2; exit 2 ;;
  esac
done

missing=()
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx)
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "proxy.sh: installing ${missing[*]} (Debian)"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}"
  # The packages start system services; the bench runs its own.
  $sudo systemctl disable --now nginx haproxy >/dev/null 2>&1 || true
fi
nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"
haproxy_bin="$(command -v haproxy || echo /usr/sbin/haproxy)"

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}"
[ "$build" = 0 ] || (cd "$root" && cargo build --release -q -p weir -p weir-load)
weir="$CARGO_TARGET_DIR/release/weir"
load="$CARGO_TARGET_DIR/release/weir-load"

work="$(mktemp -d /tmp/weir-proxy-bench.XXXXXX)"
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

weir_port="$(free_port)"
fill weir-proxy.toml "$weir_port"
taskset -c 0 "$weir" serve "$work/weir-proxy.toml" --listen "127.0.0.1:$weir_port" >>"$log" 2>&1 &
weir_pid=$!
pids+=("$weir_pid")

nginx_port="$(free_port)"
mkdir -p "$work/client_body" "$work/proxy" "$work/fastcgi" "$work/uwsgi" "$work/scgi"
fill nginx.conf "$nginx_port"
taskset -c 0 "$nginx_bin" -c "$work/nginx.conf" -p "$work" -e "$work/nginx-error.log" >>"$log" 2>&1 &
pids+=($!)

haproxy_port="$(free_port)"
fill haproxy.cfg "$haproxy_port"
taskset -c 0 "$haproxy_bin" -db -f "$work/haproxy.cfg" >>"$log" 2>&1 &
haproxy_pid=$!
pids+=("$haproxy_pid")

wait_port "$weir_port"
wait_port "$nginx_port"
wait_port "$haproxy_port"
# nginx's worker is the process doing the proxying.
nginx_worker="$(pgrep -P "$(cat "$work/nginx.pid")" | head -n1)"
upstream_pid="${pids[0]}"

scenario_args() {
  case "$1" in
    small8) echo "-c 200 -p 8 -s 64" ;;
    small1) echo "-c 50 -p 1 -s 64" ;;
    large) echo "-c 10 -p 1 -s 64KiB" ;;
    *) echo "unknown scenario $1" >&2; exit 2 ;;
  esac
}

echo "load: $(uptime)"
IFS=, read -r -a scen_list <<<"$scenarios"
for run in $(seq "$runs"); do
  for scen in "${scen_list[@]}"; do
    for srv in direct weir nginx haproxy; do
      case "$srv" in
        direct) port=$up_port pid=$upstream_pid ;;
        weir) port=$weir_port pid=$weir_pid ;;
        nginx) port=$nginx_port pid=$nginx_worker ;;
        haproxy) port=$haproxy_port pid=$haproxy_pid ;;
      esac
      # shellcheck disable=SC2046
      line="$(taskset -c 1 "$load" echo --url "ws://127.0.0.1:$port/echo" $(scenario_args "$scen") \
              --warmup "$warmup" --duration "$duration" --server-pid "$pid" 2>>"$log" \
              | tee -a "$log" | grep '^RESULT ' | tail -n1 | sed 's/^RESULT //')" || true
      [ -n "$line" ] || line='{"ok":false}'
      echo "{\"scenario\":\"$scen\",\"server\":\"$srv\",\"run\":$run,\"r\":$line}" >>"$raw"
      printf '  %-7s %-8s run %s: %s\n' "$scen" "$srv" "$run" \
        "$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print("ok" if r.get("ok") else "FAILED", round(r.get("msgs_per_s",0)), "msg/s", round(r.get("server_cpu_ns_per_msg",0)), "ns/msg", r.get("p99_us"), "p99 us")' "$line")"
    done
  done
done
echo "load: $(uptime)"

python3 - "$raw" <<'EOF'
import json, sys, statistics
from collections import defaultdict
rows = [json.loads(l) for l in open(sys.argv[1])]
by = defaultdict(list)
for x in rows:
    by[(x["scenario"], x["server"])].append(x["r"])
def med(xs):
    return statistics.median(xs) if xs else float("nan")
print()
print("| scenario | server | ok runs | msg/s | proxy CPU ns/msg | CPU/msg vs nginx | p50 µs | p99 µs | p99 added over direct µs |")
print("|---|---|---|---|---|---|---|---|---|")
for scen in dict.fromkeys(x["scenario"] for x in rows):
    def stat(srv, key):
        return med([r[key] for r in by[(scen, srv)] if r.get("ok")])
    nginx_cpu = stat("nginx", "server_cpu_ns_per_msg")
    direct_p99 = stat("direct", "p99_us")
    for srv in ["direct", "weir", "nginx", "haproxy"]:
        ok = [r for r in by[(scen, srv)] if r.get("ok")]
        cpu = stat(srv, "server_cpu_ns_per_msg")
        p99 = stat(srv, "p99_us")
        ratio = "" if srv == "direct" else "%.2fx" % (cpu / nginx_cpu)
        added = "" if srv == "direct" else "%+.0f" % (p99 - direct_p99)
        label = "direct (upstream's own CPU)" if srv == "direct" else srv
        print("| %s | %s | %d/%d | %.0f | %.0f | %s | %.0f | %.0f | %s |" % (
            scen, label, len(ok), len(by[(scen, srv)]), stat(srv, "msgs_per_s"), cpu, ratio,
            stat(srv, "p50_us"), p99, added))
EOF
echo "raw results: $raw"
