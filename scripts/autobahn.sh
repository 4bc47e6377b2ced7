#!/usr/bin/env bash
# Autobahn|Testsuite against `weir serve` on a native echo route with
# permessage-deflate on (scripts/autobahn-routes.toml): the full suite, 517
# cases, 12.* and 13.* (permessage-deflate) included; cases 1-11 offer no
# extension, so they test the uncompressed path. Judged by
# scripts/autobahn_judge.py; exits non-zero on any failed case.
# Notes: /work/shared/notes/autobahn.md (why Python 2.7).
#
# Environment:
#   AUTOBAHN_TLS=1                    the same cases over wss://: weir serves
#                                     TLS with a certificate made here (openssl)
#   AUTOBAHN_IO=epoll|uring|auto      weir serves on its workers' planes
#                                     (`weir serve --io epoll`, on io_uring
#                                     with uring, auto), not tasks
#   AUTOBAHN_URL=ws://host:port/path  test that server instead of starting weir
#   PYTHON27=/path/to/python2.7       interpreter for the virtualenv
#   AUTOBAHN_OUT=dir                  report directory [default: target/autobahn]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
TLS=${AUTOBAHN_TLS:-0}
IO=${AUTOBAHN_IO:-}
if [ "$TLS" = 1 ]; then
    OUT=${AUTOBAHN_OUT:-$TARGET_DIR/autobahn-wss}
elif [ -n "$IO" ]; then
    OUT=${AUTOBAHN_OUT:-$TARGET_DIR/autobahn-$IO}
else
    OUT=${AUTOBAHN_OUT:-$TARGET_DIR/autobahn}
fi
VENV=$ROOT/.autobahn-venv
EXPECTED_CASES=517

log() { echo "autobahn: $*" >&2; }
die() { log "$*"; exit 1; }

# Python 2.7: autobahntestsuite is Python 2 code, and Debian 12 ships none.
find_python27() {
    if [ -n "${PYTHON27:-}" ]; then echo "$PYTHON27"; return; fi
    local pyenv_root=${PYENV_ROOT:-$HOME/.pyenv} pyenv found
    pyenv=$(command -v pyenv || ls "$pyenv_root/bin/pyenv" 2>/dev/null || true)
    [ -n "$pyenv" ] && pyenv_root=$("$pyenv" root)
    found=$(ls -d "$pyenv_root"/versions/2.7.*/bin/python2.7 2>/dev/null | tail -n 1 || true)
    if [ -z "$found" ]; then found=$(command -v python2.7 || true); fi
    if [ -z "$found" ] && [ -n "$pyenv" ]; then
        log "no Python 2.7 found; pyenv install 2.7.18 (a few minutes; needs a C compiler, libssl-dev, zlib1g-dev)"
        "$pyenv" install -s 2.7.18 >&2
        found=$(ls -d "$pyenv_root"/versions/2.7.*/bin/python2.7 | tail -n 1)
    fi
    [ -n "$found" ] || die "Autobahn|Testsuite needs Python 2.7 and none was found. Install pyenv
(https://github.com/pyenv/pyenv#installation) and run 'pyenv install 2.7.18',
or set PYTHON27=/path/to/python2.7."
    echo "$found"
}

# Debian's python3 lacks the venv module until python3-venv is installed.
ensure_python3_venv() {
    python3 -c 'import ensurepip, venv' 2>/dev/null && return
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        log "installing python3-venv"
        apt-get install -y -q python3-venv >&2
    else
        die "python3 cannot create virtualenvs; install it with: sudo apt-get install python3-venv"
    fi
}

# wsaccel: autobahn's C masking and UTF-8 validation. Without it wstest
# masks every byte in Python, and groups 12 and 13 (thousands of messages
# up to 128 KiB, deflated) take over half an hour of wstest's own CPU.
ensure_wsaccel() {
    "$VENV/bin/python" -c 'import wsaccel' 2>/dev/null && return
    log "installing wsaccel into $VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check wsaccel==0.6.6 2>&1 \
        | grep -v -e DEPRECATION -e '^$' >&2 || true
    "$VENV/bin/python" -c 'import wsaccel' || die "wsaccel did not install into $VENV"
}

# The virtualenv: made once, reused after (it is gitignored).
setup_venv() {
    if [ -x "$VENV/bin/wstest" ]; then ensure_wsaccel; return; fi
    local py27 bootstrap=$TARGET_DIR/autobahn-bootstrap
    py27=$(find_python27)
    ensure_python3_venv
    log "setting up $VENV with $py27 (about a minute)"
    rm -rf "$VENV"
    mkdir -p "$TARGET_DIR"
    # Modern virtualenv cannot create a Python 2.7 environment; <20.22 can.
    python3 -m venv "$bootstrap"
    "$bootstrap/bin/pip" install -q 'virtualenv<20.22'
    "$bootstrap/bin/virtualenv" -q -p "$py27" "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check autobahntestsuite==25.10.1 2>&1 \
        | grep -v -e DEPRECATION -e '^$' >&2 || true
    [ -x "$VENV/bin/wstest" ] || die "wstest did not install into $VENV"
    ensure_wsaccel
}

# wss:// needs Twisted's TLS, i.e. pyOpenSSL, which autobahntestsuite
# already pins; installed here only if an older venv lacks it.
setup_venv_tls() {
    "$VENV/bin/python" -c 'import OpenSSL, service_identity' 2>/dev/null && return
    log "installing pyOpenSSL into $VENV for wss://"
    "$VENV/bin/pip" install -q --disable-pip-version-check 'pyOpenSSL==19.1.0' \
        'service-identity==18.1.0' 2>&1 | grep -v -e DEPRECATION -e '^$' >&2 || true
    "$VENV/bin/python" -c 'import OpenSSL' || die "pyOpenSSL did not install into $VENV"
}

# A throwaway self-signed certificate for 127.0.0.1 (wstest does not
# verify it); made per run, never committed.
make_cert() {
    command -v openssl >/dev/null || {
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
            log "installing openssl"; apt-get install -y -q openssl >&2
        else
            die "making a test certificate needs openssl: sudo apt-get install openssl"
        fi
    }
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -subj /CN=localhost -addext subjectAltName=IP:127.0.0.1,DNS:localhost \
        -keyout "$OUT/key.pem" -out "$OUT/cert.pem" 2>/dev/null
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_for_port() {
    local port=$1 pid=$2
    for _ in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || return 1
        python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), timeout=0.2)" \
            2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

setup_venv
if [ "$TLS" = 1 ]; then setup_venv_tls; fi
mkdir -p "$OUT"
rm -f "$OUT/index.json"

SERVER_PID=
stop_server() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill "$SERVER_PID" 2>/dev/null || true
        # Give it the graceful-shutdown window, then insist.
        for _ in $(seq 1 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$SERVER_PID" 2>/dev/null || true
    fi
    SERVER_PID=
}
trap stop_server EXIT

if [ -n "${AUTOBAHN_URL:-}" ]; then
    URL=$AUTOBAHN_URL
    AGENT=external
    log "testing $URL (AUTOBAHN_URL set: not starting weir)"
else
    # The same build as scripts/test.sh's `cargo test --release --workspace`
    # (which puts the weir binary in target/release too): after it, this is
    # a no-op. `cargo build -p weir` would resolve features without the
    # dev-dependencies' and rebuild tokio, hyper and wasmtime (~8 minutes).
    cargo test --release --workspace --no-run
    PORT=$(free_port)
    if [ "$TLS" = 1 ]; then
        make_cert
        {
            printf '[server]\nlisten = "127.0.0.1:%s"\ntls = { cert = "cert.pem", key = "key.pem" }\n\n' "$PORT"
            cat "$ROOT/scripts/autobahn-routes.toml"
        } >"$OUT/routes.toml"
        URL=wss://127.0.0.1:$PORT/echo
        AGENT=weir-tls
        "$TARGET_DIR/release/weir" serve "$OUT/routes.toml" >"$OUT/server.log" 2>&1 &
    else
        URL=ws://127.0.0.1:$PORT/echo
        AGENT=weir${IO:+-$IO}
        "$TARGET_DIR/release/weir" serve "$ROOT/scripts/autobahn-routes.toml" --listen "127.0.0.1:$PORT" \
            ${IO:+--io "$IO"} >"$OUT/server.log" 2>&1 &
    fi
    SERVER_PID=$!
    wait_for_port "$PORT" "$SERVER_PID" || {
        cat "$OUT/server.log" >&2
        die "weir did not start listening on 127.0.0.1:$PORT (log above)"
    }
    log "weir (pid $SERVER_PID) listening on 127.0.0.1:$PORT; log in $OUT/server.log"
fi

# Four wstest processes in parallel: wstest (Python 2, one thread) is the
# bottleneck, not weir: groups 12 and 13 (216 cases of up to 1000 deflated
# messages of up to 128 KiB) cost it minutes of CPU. Each part has its own
# report; they are merged into one index.json.
PARTS=(
    'a|["*"]|["12.3.*", "12.4.*", "12.5.*", "13.*"]'
    'b|["12.3.*", "12.4.*", "12.5.*"]|[]'
    'c|["13.1.*", "13.2.*", "13.3.*"]|[]'
    'd|["13.4.*", "13.5.*", "13.6.*", "13.7.*"]|[]'
)
for spec in "${PARTS[@]}"; do
    IFS='|' read -r part cases exclude <<<"$spec"
    mkdir -p "$OUT/$part"
    rm -f "$OUT/$part/index.json"
    cat >"$OUT/$part/spec.json" <<JSON
{"outdir": "$OUT/$part",
 "servers": [{"agent": "$AGENT", "url": "$URL"}],
 "cases": $cases, "exclude-cases": $exclude, "exclude-agent-cases": {}}
JSON
done
log "running $EXPECTED_CASES cases against $URL in ${#PARTS[@]} wstest processes (about 5 min on 2 idle cores)"
START=$SECONDS
# Bounded: a hung server must not hang CI.
WSTEST_PIDS=()
for part in a b c d; do
    (cd "$OUT/$part" && timeout 2400 "$VENV/bin/wstest" -m fuzzingclient -s spec.json \
        >"$OUT/$part/wstest.log" 2>&1) \
        || log "wstest ($part) exited with $? (see $OUT/$part/wstest.log); judging the report anyway" &
    WSTEST_PIDS+=($!)
done
# Only the wstest processes: weir, started above, runs in the background too.
wait "${WSTEST_PIDS[@]}"
log "wstest took $((SECONDS - START)) s; reports in $OUT/{a,b,c,d}/index.html"
stop_server
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
merged = {}
for part in ("a", "b", "c", "d"):
    path = os.path.join(out, part, "index.json")
    if not os.path.exists(path):
        continue
    for agent, cases in json.load(open(path)).items():
        merged.setdefault(agent, {}).update(cases)
json.dump(merged, open(os.path.join(out, "index.json"), "w"))
PY

python3 "$ROOT/scripts/autobahn_judge.py" "$OUT/index.json" "$EXPECTED_CASES"
