#!/usr/bin/env bash
# README command 2: every test. Builds the guest components, runs the Rust
# tests (unit, integration, guest fixtures), the JS and Python SDK tests, then
# Autobahn|Testsuite against `weir serve`. Needs rustup, python3 (and Python
# 2.7 via pyenv for Autobahn, see scripts/autobahn.sh); node/npm come from apt
# when missing (build-guests.sh); installs Redis for the cluster tests when
# missing (scripts/redis.sh), the OCI registry for the oci:// tests
# (scripts/registry.sh), the Node/Python clients of the
# permessage-deflate tests (host/tests/clients), the ws package for the
# proxy tests' Node upstream and the pusher example's npm packages. Set
# WEIR_SKIP_AUTOBAHN=1 to skip the Autobahn step. Beside Autobahn, the
# release artifacts are built and the image started (scripts/release.sh,
# release-test.sh; they install musl-tools, umoci, podman when missing);
# WEIR_SKIP_RELEASE=1 skips that.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v cargo >/dev/null || {
    echo "test.sh: cargo not found; install Rust with rustup: https://rustup.rs" >&2
    exit 1
}

if [ -f scripts/build-guests.sh ]; then
    bash scripts/build-guests.sh
else
    echo "test.sh: scripts/build-guests.sh not found; guest tests may fail" >&2
fi

# Headless Chromium for host/tests/browser.rs (every example route from a
# real browser), from Debian's packages when it is missing.
if ! command -v chromium >/dev/null 2>&1 && [ -z "${WEIR_CHROMIUM:-}" ]; then
    echo "test.sh: installing chromium (Debian) for the browser tests"
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q chromium
fi

# host/tests/batching.rs counts the gateway's reads and writes with strace.
if ! command -v strace >/dev/null 2>&1; then
    echo "test.sh: installing strace (Debian) for host/tests/batching.rs"
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q strace
fi

# The cluster tests (cluster.rs, pusher_cluster.rs, fleet.rs: its nine
# tests of one to three `weir serve` nodes take ~9 s) start their own
# Redis servers (Debian's redis-server).
bash scripts/redis.sh
# host/tests/oci.rs starts its own OCI registry (Debian's docker-registry,
# the CNCF distribution registry) on a loopback port; ~2 s of tests.
bash scripts/registry.sh

# Third-party clients host/tests/deflate.rs and centrifugo.rs drive (Node
# `ws` and `centrifuge`, Python `websockets` and `cent`), pinned in
# host/tests/clients; installed again when a pinned client is missing.
clients=host/tests/clients
if [ ! -d "$clients/node_modules/ws" ] || [ ! -d "$clients/node_modules/centrifuge" ]; then
    (cd "$clients" && npm ci --no-audit --no-fund --loglevel=error)
fi
if ! "$clients/.venv/bin/python" -c 'import websockets, cent' 2>/dev/null; then
    python3 -c 'import ensurepip, venv' 2>/dev/null || apt-get install -y -q python3-venv
    python3 -m venv "$clients/.venv"
    "$clients/.venv/bin/pip" install -q --disable-pip-version-check -r "$clients/requirements.txt"
fi
# The proxy tests' Node upstream: the ws package, pinned by its lock file
# (build-guests.sh above made sure node and npm are there).
if [ ! -f host/tests/proxy/node_modules/.weir-installed ] ||
    [ host/tests/proxy/package-lock.json -nt host/tests/proxy/node_modules/.weir-installed ]; then
    echo "test.sh: npm ci in host/tests/proxy (ws, for the proxy tests)"
    (cd host/tests/proxy && npm ci --no-audit --no-fund --prefer-offline)
    touch host/tests/proxy/node_modules/.weir-installed
fi

# The pusher example's backend and page libraries (pusher, pusher-js,
# laravel-echo), pinned by its lock file, for host/tests/pusher_page.rs.
if [ ! -f examples/pusher/node_modules/.weir-installed ] ||
    [ examples/pusher/package-lock.json -nt examples/pusher/node_modules/.weir-installed ]; then
    echo "test.sh: npm ci in examples/pusher (the pusher example's packages)"
    (cd examples/pusher && npm ci --no-audit --no-fund --prefer-offline --loglevel=error)
    touch examples/pusher/node_modules/.weir-installed
fi

cargo test --release --workspace

# The connection-level tests again with every gateway on its workers'
# planes (`[server] io = "epoll"`, crates/reactor/src/plane.rs), then on
# io_uring where the kernel allows it (`io = "auto"`, plane/uring.rs;
# tests/uring.rs checks the choice and the fallback).
for io in epoll auto; do
    WEIR_TEST_IO=$io cargo test --release -p weir --test plane --test native --test abuse \
        --test pubsub --test deflate --test batching --test guest_routes --test isolation \
        --test guest_faults --test guest_io --test scale --test process --test overload
done

# The guest SDK (its harness, its doc examples) and every example's own
# harness tests, natively: they are separate workspaces.
cargo test --manifest-path guest-sdk/Cargo.toml --features serde
cargo test --manifest-path examples/Cargo.toml --workspace

# The JS and Python SDKs natively: their codecs against the shared ABI
# vectors (abi/vectors/, as abi/tests/vectors.rs does for Rust) and their
# runtimes, I/O, proxy filter hooks, realtime reads, namespace and Pusher
# guest hooks and check-state (for JS also the
# rewrite, under node's test runner;
# for Python under unittest), and every JS and Python example under its
# SDK's harness (guest-sdk/js/src/testing.mjs, weir_guest.testing).
# build-guests.sh above made sure node and python3 are there.
node --test guest-sdk/js/test/ examples/js/test/
python3 -m unittest discover -s guest-sdk/python/tests
python3 -m unittest discover -s examples/python/tests

# The outbound queue's write turn under every interleaving loom explores
# (crates/reactor/src/outbound/model.rs, ~40 s warm). The cfg changes every
# crate's flags, so it builds in a target dir of its own.
RUSTFLAGS="--cfg weir_loom" CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom" \
    cargo test --release -p weir-reactor --lib outbound::model

# The release artifacts (scripts/release.sh: the static musl binary, the
# tarball, the OCI image, the systemd unit checked by systemd-analyze) and
# the image started once (scripts/release-test.sh). The musl build is a
# second full build in a target dir of its own (no lock shared with the
# builds above or Autobahn's), so it runs in the background while
# Autobahn's passes run, and its log is printed when it is waited for.
# Measured on a 2-core machine shared with other builds (load 6-9): the
# cold musl build took 24m41s, a rebuild from ring and wasmtime up 7m01s,
# release.sh with nothing to rebuild 16 s, release-test.sh 30-40 s (README,
# "Installing").
# WEIR_SKIP_RELEASE=1 skips it.
release_pid=
release_log=
if [ "${WEIR_SKIP_RELEASE:-0}" = 1 ]; then
    echo "test.sh: WEIR_SKIP_RELEASE=1: release artifacts skipped" >&2
else
    release_log=$(mktemp)
    # A process group of its own (setsid), so a failure below stops it all;
    # nice 10, so Autobahn's timing-sensitive cases get the CPU first and
    # the build takes what they leave.
    setsid nice -n 10 bash -c '
        started=$SECONDS
        if WEIR_RELEASE_SKIP_GUESTS=1 bash scripts/release.sh && bash scripts/release-test.sh; then
            status=0
        else
            status=$?
        fi
        echo "test.sh: release.sh + release-test.sh took $((SECONDS - started)) s (exit $status)"
        exit $status
    ' >"$release_log" 2>&1 &
    release_pid=$!
    trap '[ -z "$release_pid" ] || kill -- -"$release_pid" 2>/dev/null || true' EXIT
fi

if [ "${WEIR_SKIP_AUTOBAHN:-0}" = 1 ]; then
    echo "test.sh: WEIR_SKIP_AUTOBAHN=1: Autobahn|Testsuite skipped" >&2
else
    bash scripts/autobahn.sh
    # The same cases on the workers' planes (`weir serve --io epoll`), and
    # over wss:// (weir's TLS termination).
    AUTOBAHN_IO=epoll bash scripts/autobahn.sh
    # On io_uring where the kernel allows it (`--io auto`: else on epoll,
    # as the log says).
    AUTOBAHN_IO=auto bash scripts/autobahn.sh
    AUTOBAHN_TLS=1 bash scripts/autobahn.sh
fi

if [ -n "$release_pid" ]; then
    release_status=0
    wait "$release_pid" || release_status=$?
    release_pid=
    echo "==> scripts/release.sh, scripts/release-test.sh (ran beside Autobahn):"
    cat "$release_log"
    rm -f "$release_log"
    [ "$release_status" = 0 ] || { echo "test.sh: the release artifacts failed (exit $release_status)" >&2; exit 1; }
fi
