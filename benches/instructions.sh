#!/usr/bin/env bash
# benches/instructions.sh — user-space instructions per message, counted by
# valgrind (callgrind), for servers on the native echo path.
#
# CPU time per message moves ±5–15 % with what else runs on this shared
# machine; the number of instructions a server executes per message hardly
# moves at all. This script counts them, so a change to the hot path can be
# judged against a previous build (or against C++ uWebSockets) even on a busy
# machine. It counts user space only: syscalls and the kernel's TCP work are
# not in it (benches/compare.sh and benches/profile.sh measure those), and it
# says nothing of cache misses or branch mispredictions.
#
# How: each server runs under callgrind, one worker, on loopback; weir-load
# drives it for a short and for a long window (no warm-up, so both include
# the same start-up and handshakes); instructions per message are
#   (Ir(long) − Ir(short)) ÷ (messages(long) − messages(short)).
# Servers alternate, --runs rounds; the median per server and the ratio to
# the first server are printed. Under valgrind a server runs ~50× slower, so
# the message rate (and with it the batch per read) is lower than in
# compare.sh: compare builds with each other here, not with compare.sh rows.
#
# Usage: benches/instructions.sh [--servers weir,weir-base,uws-cpp]
#          [--scenarios echo64x200p8,echo64x50] [--runs 3]
#          (also echo4kx50; wss64x200p8 / wss64x50 over TLS 1.3 with a
#          throwaway certificate; proxy64x200p8 / proxy64x50: the server is
#          a native proxy in front of WEIR_BIN's echo run without valgrind,
#          counted per echo through it. weir builds only for these)
#          [--short 3] [--long 9]          (seconds of load)
# Environment: WEIR_BIN, WEIR_BASE_BIN (another weir build), WEIR_IO and
# WEIR_BASE_IO (`weir serve --io`: tasks or epoll), UWS_CPP_BIN
# (benches/peers/build-uws-cpp.sh), WEIR_LOAD, CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."

target=${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}
weir_bin=${WEIR_BIN:-$target/release/weir}
load=${WEIR_LOAD:-$target/release/weir-load}
uws_cpp=${UWS_CPP_BIN:-$target/uws-cpp/uws-cpp}
servers=weir
scenarios=echo64x200p8,echo64x50
runs=3
short=3
long=9
while [ $# -gt 0 ]; do
  case "$1" in
    --servers) servers=$2; shift 2 ;;
    --scenarios) scenarios=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --short) short=$2; shift 2 ;;
    --long) long=$2; shift 2 ;;
    -h|--help) sed -n 2,31p "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 2; }
[ -x "$load" ] || { echo "no weir-load at $load (cargo build --release -p weir-load)" >&2; exit 2; }

scenario_args() {
  case "$1" in
    echo64x200p8) echo "-c 200 -p 8 -s 64" ;;
    echo64x50) echo "-c 50 -p 1 -s 64" ;;
    echo4kx50) echo "-c 50 -p 1 -s 4KiB" ;;
    wss64x200p8) echo "-c 200 -p 8 -s 64" ;;
    wss64x50) echo "-c 50 -p 1 -s 64" ;;
    proxy64x200p8) echo "-c 200 -p 8 -s 64" ;;
    proxy64x50) echo "-c 50 -p 1 -s 64" ;;
    *) echo "unknown scenario $1" >&2; return 2 ;;
  esac
}

work=$(mktemp -d /tmp/weir-instructions.XXXXXX)
cat > "$work/routes.toml" <<'TOML'
[[route]]
path = "/echo"
native = "echo"
TOML
if [[ ",$scenarios," == *",wss"* ]]; then
  command -v openssl >/dev/null || { echo "the wss scenarios need openssl" >&2; exit 2; }
  # A throwaway certificate for 127.0.0.1; its key stays in $work.
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -keyout "$work/key.pem" -out "$work/cert.pem" -subj /CN=localhost \
    -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -addext "basicConstraints=critical,CA:FALSE" \
    -addext "keyUsage=digitalSignature" -addext "extendedKeyUsage=serverAuth" 2>/dev/null
  { printf '[server]\ntls = { cert = "cert.pem", key = "key.pem" }\n\n'; cat "$work/routes.toml"; } \
    > "$work/routes-tls.toml"
fi
port=19471
server_pid=
upstream_pid=
if [[ ",$scenarios," == *",proxy"* ]]; then
  # The proxy's upstream: weir's native echo, not under valgrind.
  upstream_port=19469
  "$weir_bin" serve "$work/routes.toml" --workers 1 --listen "127.0.0.1:$upstream_port" \
    >"$work/upstream.log" 2>&1 &
  upstream_pid=$!
  printf '[[route]]\npath = "/echo"\nnative = "proxy"\nupstream = "ws://127.0.0.1:%s/echo"\n' \
    "$upstream_port" >"$work/routes-proxy.toml"
fi

cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi
  if [ -n "$upstream_pid" ]; then kill "$upstream_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# server_cmd SERVER SCENARIO
server_cmd() {
  local routes=$work/routes.toml
  [[ $2 != wss* ]] || routes=$work/routes-tls.toml
  [[ $2 != proxy* ]] || routes=$work/routes-proxy.toml
  case "$1" in
    weir) echo "$weir_bin serve $routes --workers 1 --listen 127.0.0.1:$port${WEIR_IO:+ --io $WEIR_IO}" ;;
    weir-base)
      [ -n "${WEIR_BASE_BIN:-}" ] || { echo "weir-base needs WEIR_BASE_BIN" >&2; return 2; }
      echo "$WEIR_BASE_BIN serve $routes --workers 1 --listen 127.0.0.1:$port${WEIR_BASE_IO:+ --io $WEIR_BASE_IO}" ;;
    uws-cpp)
      [ -x "$uws_cpp" ] || { echo "uws-cpp not built (benches/peers/build-uws-cpp.sh)" >&2; return 2; }
      [[ $2 == echo* ]] || { echo "uws-cpp serves only the echo scenarios" >&2; return 2; }
      echo "$uws_cpp $port 1" ;;
    *) echo "unknown server $1" >&2; return 2 ;;
  esac
}

# count SERVER SCENARIO SECONDS → prints "IR MESSAGES"
count() {
  local cmd args out ir msgs
  args=$(scenario_args "$2")
  port=$((port + 1))
  cmd=$(server_cmd "$1" "$2")
  local url="ws://127.0.0.1:$port/echo" tls=()
  [[ $2 != wss* ]] || { url="wss://127.0.0.1:$port/echo"; tls=(--ca "$work/cert.pem"); }
  out="$work/cg.out"
  rm -f "$out"
  # shellcheck disable=SC2086
  valgrind --tool=callgrind --callgrind-out-file="$out" $cmd >"$work/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 300); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.2
  done
  # shellcheck disable=SC2086
  "$load" echo --url "$url" "${tls[@]}" $args --warmup 0s --duration "${3}s" \
    >"$work/load.txt" 2>&1 || { cat "$work/load.txt" >&2; return 1; }
  kill -TERM "$server_pid"
  wait "$server_pid" 2>/dev/null || true
  server_pid=
  grep -q '"ok":true' "$work/load.txt" || { echo "$1: weir-load failed" >&2; cat "$work/load.txt" >&2; return 1; }
  msgs=$(grep -o '"msgs":[0-9]*' "$work/load.txt" | cut -d: -f2)
  ir=$(sed -n 's/^summary: *//p' "$out")
  echo "$ir $msgs"
}

IFS=, read -ra server_list <<<"$servers"
IFS=, read -ra scenario_list <<<"$scenarios"
declare -A results
for scen in "${scenario_list[@]}"; do
  scenario_args "$scen" >/dev/null
  for run in $(seq "$runs"); do
    order=("${server_list[@]}")
    if [ $((run % 2)) = 0 ]; then
      order=()
      for ((i = ${#server_list[@]} - 1; i >= 0; i--)); do order+=("${server_list[$i]}"); done
    fi
    for srv in "${order[@]}"; do
      read -r ir_s m_s < <(count "$srv" "$scen" "$short")
      read -r ir_l m_l < <(count "$srv" "$scen" "$long")
      per=$(( (ir_l - ir_s) / (m_l - m_s) ))
      printf '%-14s %-10s run %d: %6d instructions/msg (%d msgs)\n' "$scen" "$srv" "$run" "$per" $((m_l - m_s))
      results[$scen,$srv]+="$per "
    done
  done
done

median() { tr ' ' '\n' | sed '/^$/d' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo
echo "| scenario | $(printf '%s | ' "${server_list[@]}")ratio to ${server_list[0]} |"
echo "|---|$(for _ in "${server_list[@]}"; do printf -- '---|'; done)---|"
for scen in "${scenario_list[@]}"; do
  first=$(echo "${results[$scen,${server_list[0]}]}" | median)
  row="| $scen |"
  ratios=""
  for srv in "${server_list[@]}"; do
    m=$(echo "${results[$scen,$srv]}" | median)
    row+=" $m |"
    [ "$srv" = "${server_list[0]}" ] || ratios+="$(printf '%s %.2f× ' "$srv" "$(echo "$m / $first" | bc -l)")"
  done
  echo "$row ${ratios:-–} |"
done
echo "(user-space instructions per message under callgrind, median of $runs)"
