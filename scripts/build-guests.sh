#!/usr/bin/env bash
# Build every guest under examples/ (the handlers and the test fixtures) for
# wasm32-wasip2 and copy each component to examples/wasm/<name>.wasm.
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
names=(echo json binary chat auth counter shout faulty wrong-world big-memory)
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
echo "build-guests: ${#names[@]} components in $out"
