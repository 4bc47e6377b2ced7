#!/usr/bin/env bash
# Build every guest under examples/ (the handlers and the test fixtures) and
# put each component in examples/wasm/: the Rust ones (wasm32-wasip2) as
# <name>.wasm, the JavaScript ones (examples/js, QuickJS through
# componentize-qjs) as js-<name>.wasm, the Python ones (examples/python,
# componentize-py) as py-<name>.wasm.
#
# JS and Python toolchains are pinned in the repo (guest-sdk/js/package-lock.json,
# guest-sdk/python/requirements-build.txt) and installed into ignored folders
# (guest-sdk/js/node_modules, guest-sdk/python/.venv) on first use; later runs
# reuse them, and a component is rebuilt only when its source, the SDK, the
# WIT or the toolchain changed. node/npm and python3 with venv come from apt
# when missing. WEIR_GUESTS=rust skips the JS and Python guests.
#
# Toolchain: rustup's wasm32-wasip2 target when `rustup target add` works;
# otherwise Debian's rust-web packages with build-std (installed with apt if
# missing). WEIR_GUEST_TOOLCHAIN=rustup|debian forces one route. Target dir: $CARGO_TARGET_DIR/wasm when CARGO_TARGET_DIR is set,
# else examples/target, so the host's target dir is never mixed with guests.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
examples="$root/examples"
out="$examples/wasm"
target_dir="${CARGO_TARGET_DIR:+$CARGO_TARGET_DIR/wasm}"
target_dir="${target_dir:-$examples/target}"
names=(echo json binary chat auth counter shout presence ticker remote-auth moderate faulty wrong-world big-memory io-probe fetch-echo state-v1 state-v2 state-v3 rt-probe pusher-gate)
# 64 KiB shadow stack: keep in step with examples/.cargo/config.toml (RUSTFLAGS
# set here replaces that file's rustflags).
stack_flag="-C link-arg=-zstack-size=65536"

build_rustup() {
    command -v rustup >/dev/null 2>&1 || return 1
    rustup target add wasm32-wasip2 >/dev/null 2>&1 || return 1
    echo "build-guests: rustup toolchain ($(rustc --version))"
    # RUSTFLAGS from the caller (e.g. CI's -D warnings) would replace the
    # config file's flags, so pass the stack size here as well. With
    # --target, RUSTFLAGS reaches only the wasm artifacts, not proc-macros.
    (cd "$examples" && RUSTFLAGS="${RUSTFLAGS:-} $stack_flag" \
        cargo build --release --target wasm32-wasip2 --target-dir "$target_dir")
}

build_debian() {
    echo "build-guests: rustup cannot provide wasm32-wasip2; using Debian rust-web + build-std"
    local pkgs=(rustc-web cargo-web rust-web-llvm rust-web-src wasi-libc lld)
    if ! dpkg -s "${pkgs[@]}" >/dev/null 2>&1; then
        local sudo=""
        [ "$(id -u)" -ne 0 ] && sudo="sudo"
        $sudo apt-get update
        $sudo apt-get install -y "${pkgs[@]}"
    fi
    (cd "$examples" && RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 \
        RUSTFLAGS="${RUSTFLAGS:-} -L /usr/lib/wasm32-wasi $stack_flag" \
        /usr/bin/cargo build --release -Zbuild-std=std,panic_abort \
        --target wasm32-wasip2 --target-dir "$target_dir")
}

case "${WEIR_GUEST_TOOLCHAIN:-}" in
    rustup) build_rustup ;;
    debian) build_debian ;;
    *) build_rustup || build_debian ;;
esac

mkdir -p "$out"
for name in "${names[@]}"; do
    src="$target_dir/wasm32-wasip2/release/${name//-/_}.wasm"
    if [ ! -f "$src" ]; then
        echo "build-guests: $src was not built" >&2
        exit 1
    fi
    cp "$src" "$out/$name.wasm"
done
echo "build-guests: ${#names[@]} Rust components in $out"

[ "${WEIR_GUESTS:-all}" = rust ] && exit 0

# apt-get install, only for what is missing (CI images and fresh machines).
apt_install() {
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    echo "build-guests: installing $* with apt-get"
    $sudo apt-get update
    $sudo apt-get install -y "$@"
}

# True when $1 exists and is newer than every other argument (files or
# folders, searched recursively; caches and toolchains left out).
fresh() {
    local target=$1
    shift
    [ -f "$target" ] || return 1
    [ -z "$(find "$@" -newer "$target" -not -path '*/node_modules/*' \
        -not -path '*/.venv/*' -not -path '*/__pycache__/*' -print -quit 2>/dev/null)" ]
}

sdk_js="$root/guest-sdk/js"
sdk_py="$root/guest-sdk/python"
wit="$root/wit"
# Both SDKs build against weir:gateway 0.4.0 (wit/weir.wit); 0.3.0 for
# the -v3 components the tests of the older world use.
wit_v3="$root/wit/0.3.0"

# JavaScript: componentize-qjs from npm, exactly as package-lock.json pins it.
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || apt_install nodejs npm
js_stamp="$sdk_js/node_modules/.weir-installed"
if ! fresh "$js_stamp" "$sdk_js/package-lock.json" "$sdk_js/package.json"; then
    echo "build-guests: npm ci in guest-sdk/js (componentize-qjs, pinned)"
    (cd "$sdk_js" && npm ci --no-audit --no-fund --prefer-offline)
    touch "$js_stamp"
fi
js_built=0
for src in "$examples"/js/*.js "$examples"/js/fixtures/*.js; do
    name="js-$(basename "$src" .js)"
    if ! fresh "$out/$name.wasm" "$src" "$sdk_js/src" "$sdk_js/build.mjs" "$wit/weir.wit" "$js_stamp"; then
        node "$sdk_js/build.mjs" "$src" -o "$out/$name.wasm" >/dev/null
        js_built=$((js_built + 1))
    fi
done
# The echo example for weir:gateway 0.3.0 too: host/tests/guest_io.rs checks
# that the gateway still runs a component built before I/O.
if ! fresh "$out/js-echo-v3.wasm" "$examples/js/echo.js" "$sdk_js/src" "$sdk_js/build.mjs" "$wit_v3" "$js_stamp"; then
    node "$sdk_js/build.mjs" "$examples/js/echo.js" --world 0.3.0 -o "$out/js-echo-v3.wasm" >/dev/null
    js_built=$((js_built + 1))
fi
# The wrong-world fixture is built against its own WIT, without the SDK.
ww="$examples/js/fixtures/wrong-world"
if ! fresh "$out/js-wrong-world.wasm" "$ww" "$js_stamp"; then
    "$sdk_js/node_modules/.bin/componentize-qjs" --sync -w "$ww/wrong.wit" -n wrong \
        -j "$ww/app.js" -o "$out/js-wrong-world.wasm" >/dev/null
    js_built=$((js_built + 1))
fi
echo "build-guests: JS components in $out ($js_built rebuilt)"

# Python: componentize-py from PyPI, exactly as requirements-build.txt pins it.
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || apt_install python3-venv
py_stamp="$sdk_py/.venv/.weir-installed"
if ! fresh "$py_stamp" "$sdk_py/requirements-build.txt"; then
    echo "build-guests: pip install into guest-sdk/python/.venv (componentize-py, pinned)"
    [ -x "$sdk_py/.venv/bin/pip" ] || python3 -m venv "$sdk_py/.venv"
    "$sdk_py/.venv/bin/pip" install --quiet --disable-pip-version-check \
        -r "$sdk_py/requirements-build.txt"
    touch "$py_stamp"
fi
# componentize-py takes ~20 s a component, mostly single-threaded: two at
# a time.
py_pids=()
py_built=0
for src in "$examples"/python/*.py "$examples"/python/fixtures/*.py; do
    name="py-$(basename "$src" .py)"
    if ! fresh "$out/$name.wasm" "$src" "$sdk_py/weir_guest" "$sdk_py/build.py" "$wit/weir.wit" "$py_stamp"; then
        python3 "$sdk_py/build.py" "$src" -o "$out/$name.wasm" &
        py_pids+=($!)
        py_built=$((py_built + 1))
        if [ "${#py_pids[@]}" -ge 2 ]; then
            wait "${py_pids[0]}"
            py_pids=("${py_pids[@]:1}")
        fi
    fi
done
# The echo example for weir:gateway 0.3.0 too: host/tests/cli.rs checks
# that `weir check` warns of I/O settings on a 0.3.0 Python component.
if ! fresh "$out/py-echo-v3.wasm" "$examples/python/echo.py" "$sdk_py/weir_guest" "$sdk_py/build.py" "$wit_v3" "$py_stamp"; then
    python3 "$sdk_py/build.py" "$examples/python/echo.py" --world 0.3.0 -o "$out/py-echo-v3.wasm" &
    py_pids+=($!)
    py_built=$((py_built + 1))
fi
ww="$examples/python/fixtures/wrong-world"
if ! fresh "$out/py-wrong-world.wasm" "$ww" "$py_stamp"; then
    (cd "$ww" && "$sdk_py/.venv/bin/componentize-py" -d wrong.wit -w wrong componentize app \
        -o "$out/py-wrong-world.wasm" >/dev/null) &
    py_pids+=($!)
    py_built=$((py_built + 1))
fi
for pid in "${py_pids[@]}"; do
    wait "$pid"
done
echo "build-guests: Python components in $out ($py_built rebuilt)"
