#!/usr/bin/env bash
# Starts the OCI image scripts/release.sh built (dist/weir-VERSION-oci.tar)
# once and checks it serves: GET /readyz says 200, and a native route
# (/echo), a Rust guest (/plain) and a JavaScript guest (/js/plain) each
# take a WebSocket upgrade and echo a message (scripts/release_probe.py, a
# client on Python's standard library). Then SIGTERM, and the container
# must exit 0 (weir's drain).
#
# How the image runs, in this order:
#   podman run (Debian's podman, installed when missing), with the host's
#     network and an explicit --ulimit (podman's default raises limits
#     past what a container-in-a-container may); retried with runc when
#     crun cannot start it (crun refuses a hybrid cgroup v1/v2 host);
#   else the image's rootfs unpacked with umoci, and its entrypoint run
#     from there under chroot as the image's user (when root), or in
#     place (when not).
# WEIR_RELEASE_RUN=podman|unpack forces one. The output says which ran.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"$/\1/p' Cargo.toml)
archive="$root/dist/weir-$version-oci.tar"
[ -f "$archive" ] || { echo "release-test: $archive missing: run scripts/release.sh" >&2; exit 1; }
paths=(/echo /plain /js/plain)
# Compiling the guests (the cache starts empty) on a busy machine.
ready_seconds=120
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
addr="127.0.0.1:$port"
args=(serve /etc/weir/routes.toml --listen "$addr")
mode="${WEIR_RELEASE_RUN:-}"
work=$(mktemp -d)
pid=
container=
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null || true
    fi
    if [ -n "$container" ]; then
        podman rm -f "$container" >/dev/null 2>&1 || true
        podman rmi -f "$image" >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
if [ -z "$mode" ] || [ "$mode" = podman ]; then
    if ! command -v podman >/dev/null 2>&1; then
        echo "release-test: installing podman (Debian)"
        $sudo apt-get update -q
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q podman runc ||
            echo "release-test: podman could not be installed"
    fi
fi

# Waits for the probe, then SIGTERM to $pid: its exit status must be 0.
probe_and_stop() {
    python3 scripts/release_probe.py "$addr" "$ready_seconds" "$pid" "${paths[@]}"
    kill -TERM "$pid"
    local status=0
    wait "$pid" || status=$?
    pid=
    [ "$status" = 0 ] || { echo "release-test: exit status $status after SIGTERM" >&2; return 1; }
    echo "release-test: exited 0 after SIGTERM"
}

# Starts `podman run` in the background; true once the container runs.
podman_start() {
    local runtime=("$@")
    container="weir-release-test-$$"
    podman rm -f "$container" >/dev/null 2>&1 || true
    # The host's limits, not podman's defaults (1048576 files, 32768
    # processes), which an unprivileged or nested host may not grant.
    local nofile nproc
    nofile=$(ulimit -Hn)
    nproc=$(ulimit -Hu)
    [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ] && nproc=32768
    podman run --rm --name "$container" "${runtime[@]}" --network=host \
        --ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc" \
        "$image" "${args[@]}" >"$work/podman.log" 2>&1 &
    pid=$!
    # Running, or failed to start (then podman exits within seconds).
    for _ in $(seq 1 100); do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "release-test: podman run${runtime[*]:+ ${runtime[*]}} failed: $(tail -3 "$work/podman.log")"
            pid=
            return 1
        fi
        if [ "$(podman inspect -f '{{.State.Running}}' "$container" 2>/dev/null)" = true ]; then
            return 0
        fi
        sleep 0.1
    done
    echo "release-test: podman run${runtime[*]:+ ${runtime[*]}}: the container did not start: $(tail -3 "$work/podman.log")"
    kill -KILL "$pid" 2>/dev/null || true
    pid=
    return 1
}

ran=
if { [ -z "$mode" ] || [ "$mode" = podman ]; } && command -v podman >/dev/null 2>&1; then
    # The archive's reference, weir:VERSION, is loaded as localhost/weir:VERSION.
    image="localhost/weir:$version"
    podman rmi -f "$image" >/dev/null 2>&1 || true
    loaded=$(podman load -q -i "$archive" 2>&1) || { echo "release-test: podman load: $loaded" >&2; exit 1; }
    [ "$loaded" = "Loaded image: $image" ] || { echo "release-test: podman load: $loaded" >&2; exit 1; }
    if podman_start || { command -v runc >/dev/null 2>&1 && podman_start --runtime runc; }; then
        echo "release-test: podman run $image ${args[*]} (its log is printed if the check fails)"
        probe_and_stop || { cat "$work/podman.log" >&2; exit 1; }
        ran=podman
    elif [ "$mode" = podman ]; then
        echo "release-test: WEIR_RELEASE_RUN=podman and podman cannot start the image" >&2
        exit 1
    fi
fi

if [ -z "$ran" ]; then
    command -v umoci >/dev/null 2>&1 || {
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q umoci
    }
    mkdir "$work/layout"
    tar -C "$work/layout" -xf "$archive"
    umoci unpack --rootless --image "$work/layout:weir:$version" "$work/bundle" >/dev/null
    rootfs="$work/bundle/rootfs"
    config="$work/bundle/config.json"
    # The image's entrypoint, user and environment, from its runtime config.
    read -r entrypoint user env_cache < <(python3 -c '
import json, sys
p = json.load(open(sys.argv[1]))["process"]
env = dict(e.split("=", 1) for e in p["env"])
print(p["args"][0], "{}:{}".format(p["user"]["uid"], p["user"]["gid"]), env.get("WEIR_CACHE_DIR", ""))
' "$config")
    if [ "$(id -u)" -eq 0 ]; then
        echo "release-test: podman unavailable; chroot $rootfs --userspec=$user $entrypoint ${args[*]}"
        env -i WEIR_CACHE_DIR="$env_cache" RUST_LOG=info \
            "$(command -v chroot)" --userspec="$user" "$rootfs" "$entrypoint" "${args[@]}" &
    else
        echo "release-test: podman unavailable, not root: $rootfs$entrypoint in place"
        env -i WEIR_CACHE_DIR="$work/cache" RUST_LOG=info \
            "$rootfs$entrypoint" serve "$rootfs/etc/weir/routes.toml" --listen "$addr" &
    fi
    pid=$!
    probe_and_stop
    ran=unpacked
fi
echo "release-test: ok ($ran)"
