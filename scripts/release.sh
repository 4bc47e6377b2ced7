#!/usr/bin/env bash
# Release artifacts in dist/ (README, "Installing"):
#   weir-VERSION-x86_64-linux-musl.tar.gz  the static binary, the shipped
#       routes file (deploy/routes.toml) and the example components it
#       names (wasm/), the systemd unit and the Kubernetes manifests;
#   weir-VERSION-oci.tar  an OCI image (an oci-archive: the OCI layout
#       dist/oci/ in one tar), FROM scratch: the binary, CA roots, the
#       routes file and components under /etc/weir; built by umoci, no
#       daemon and no root needed;
#   SHA256SUMS  of both.
# and checks on the way: the binary is static (file, ldd) and runs (`weir
# check` compiles every shipped component with it), the systemd unit passes
# `systemd-analyze verify`. scripts/release-test.sh then starts the image.
#
# Installs what is missing on Debian: rustup's x86_64-unknown-linux-musl
# target, musl-tools (musl-gcc: ring, the TLS crypto, has C and assembly
# parts), umoci, file, systemd (for systemd-analyze). The musl build has a
# target dir of its own, $CARGO_TARGET_DIR/musl (or
# WEIR_RELEASE_TARGET_DIR), so it never waits on the lock of the tests'.
# WEIR_RELEASE_SKIP_GUESTS=1 skips scripts/build-guests.sh (test.sh has run
# it already).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

started=$SECONDS
step() { echo "release: $* (+$((SECONDS - started))s)"; }
fail() { echo "release: $*" >&2; exit 1; }

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"$/\1/p' Cargo.toml)
[ -n "$version" ] || fail "no version in Cargo.toml's [workspace.package]"
triple=x86_64-unknown-linux-musl
name="weir-$version-x86_64-linux-musl"
dist="$root/dist"
target_dir="${WEIR_RELEASE_TARGET_DIR:-${CARGO_TARGET_DIR:-$root/target}/musl}"
# Timestamps in the archives: the last commit's, so two builds of one
# commit make the same tarball layout. Not exported: cc-rs and wasmtime's
# build scripts rerun when SOURCE_DATE_EPOCH changes, and with it every
# crate above ring and wasmtime (8 minutes here for each new commit).
epoch="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}"
unset SOURCE_DATE_EPOCH

apt_install() {
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    echo "release: installing $* (Debian)"
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "$@"
}
missing=()
command -v musl-gcc >/dev/null 2>&1 || missing+=(musl-tools)
command -v umoci >/dev/null 2>&1 || missing+=(umoci)
command -v file >/dev/null 2>&1 || missing+=(file)
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
command -v strip >/dev/null 2>&1 || missing+=(binutils)
[ -e /etc/ssl/certs/ca-certificates.crt ] || missing+=(ca-certificates)
# The unit's ExecReload names /bin/kill (verify wants it executable).
[ -x /bin/kill ] || missing+=(procps)
[ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"
if ! rustup target list --installed | grep -qx "$triple"; then
    rustup target add "$triple"
fi

if [ "${WEIR_RELEASE_SKIP_GUESTS:-0}" != 1 ]; then
    step "building the example components (scripts/build-guests.sh)"
    bash scripts/build-guests.sh
fi

# The components the shipped routes file names (guest = "wasm/X.wasm").
mapfile -t guests < <(sed -n 's/^guest = "\(wasm\/[^"]*\)"$/\1/p' deploy/routes.toml)
[ ${#guests[@]} -gt 0 ] || fail "deploy/routes.toml names no guest component"
for g in "${guests[@]}"; do
    [ -f "examples/$g" ] || fail "examples/$g missing: run scripts/build-guests.sh"
done

step "building weir for $triple (target dir $target_dir)"
# ring's C and assembly through musl-gcc; Rust links with its own musl
# (self-contained), so the result needs no libc on the host.
CC_x86_64_unknown_linux_musl=musl-gcc \
    cargo build --release --locked --target "$triple" --target-dir "$target_dir" -p weir --bin weir
bin="$target_dir/$triple/release/weir"

kind=$(file -b "$bin")
case "$kind" in
    *"static-pie linked"* | *"statically linked"*) ;;
    *) fail "$bin is not static: $kind" ;;
esac
# ldd says "not a dynamic executable" (or "statically linked") and lists
# no library for a static binary.
libs=$(ldd "$bin" 2>&1 || true)
if echo "$libs" | grep -q '=>'; then
    fail "$bin loads shared libraries: $libs"
fi
step "static: $kind; ldd: $(echo "$libs" | head -1 | sed 's/^[[:space:]]*//')"

rm -rf "${dist:?}/$name" "$dist/oci" "$dist/$name.tar.gz" "$dist/weir-$version-oci.tar" "$dist/SHA256SUMS"
stage="$dist/$name"
mkdir -p "$stage/wasm"
# Without the DWARF line tables the release profile keeps (a 202 MB
# binary becomes 46 MB): panics and profilers still name functions (the
# symbol table stays), not lines.
strip --strip-debug -o "$stage/weir" "$bin"
chmod 0755 "$stage/weir"
bin="$stage/weir"
install -m 0644 deploy/routes.toml "$stage/routes.toml"
for g in "${guests[@]}"; do
    install -m 0644 "examples/$g" "$stage/$g"
done
install -m 0644 deploy/systemd/weir.service "$stage/weir.service"
mkdir -p "$stage/kubernetes"
install -m 0644 deploy/kubernetes/*.yaml "$stage/kubernetes/"
install -m 0644 README.md "$stage/README.md"

# The static binary itself compiles every shipped component (Cranelift
# under musl), with the cache off.
step "weir check with the static binary"
WEIR_CACHE_DIR="" "$stage/weir" check "$stage/routes.toml"

step "systemd-analyze verify deploy/systemd/weir.service"
# An offline root: the unit's binaries where it names them (verify checks
# that ExecStart's is executable), and the system's own units for its
# dependencies. verify exits 0 on settings it ignores, so any output fails.
sdroot=$(mktemp -d)
trap 'rm -rf "$sdroot"' EXIT
mkdir -p "$sdroot/usr/local/bin" "$sdroot/bin" "$sdroot/etc/systemd/system" "$sdroot/usr/lib/systemd"
cp "$bin" "$sdroot/usr/local/bin/weir"
cp /bin/kill "$sdroot/bin/kill"
units=/usr/lib/systemd/system
[ -d "$units" ] || units=/lib/systemd/system
cp -a "$units" "$sdroot/usr/lib/systemd/system"
cp deploy/systemd/weir.service "$sdroot/etc/systemd/system/"
verify=$(systemd-analyze verify --root="$sdroot" "$sdroot/etc/systemd/system/weir.service" 2>&1) ||
    fail "systemd-analyze verify failed: $verify"
[ -z "$verify" ] || fail "systemd-analyze verify: $verify"
exposure=$(systemd-analyze security --offline=true --root="$sdroot" \
    "$sdroot/etc/systemd/system/weir.service" 2>&1 | grep 'Overall exposure' || true)
step "unit verified; ${exposure#→ }"

step "tarball"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
    -C "$dist" -czf "$dist/$name.tar.gz" "$name"

step "OCI image (umoci)"
layout="$dist/oci"
bundle=$(mktemp -d)
trap 'rm -rf "$sdroot" "$bundle"' EXIT
umoci init --layout "$layout"
umoci new --image "$layout:$version"
# --rootless: no root needed; every file in the layer belongs to root (0:0).
umoci unpack --rootless --image "$layout:$version" "$bundle/b"
rootfs="$bundle/b/rootfs"
install -D -m 0755 "$bin" "$rootfs/usr/local/bin/weir"
install -D -m 0644 deploy/routes.toml "$rootfs/etc/weir/routes.toml"
for g in "${guests[@]}"; do
    install -D -m 0644 "examples/$g" "$rootfs/etc/weir/$g"
done
# weir trusts webpki-roots (built in) by default; the system bundle is for
# an outbound_ca or upstream_ca that names it.
install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
# The only writable place the image has: the component cache goes there.
install -d -m 1777 "$rootfs/tmp"
created="$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)"
umoci repack --image "$layout:$version" --history.created "$created" \
    --history.created_by "scripts/release.sh" "$bundle/b"
umoci config --image "$layout:$version" \
    --config.entrypoint /usr/local/bin/weir \
    --config.cmd serve --config.cmd /etc/weir/routes.toml \
    --config.user 65532:65532 \
    --config.env WEIR_CACHE_DIR=/tmp/weir-cache \
    --config.exposedports 9001/tcp \
    --config.workingdir / \
    --config.label "org.opencontainers.image.title=weir" \
    --config.label "org.opencontainers.image.version=$version" \
    --config.label "org.opencontainers.image.licenses=Apache-2.0" \
    --created "$created" --history.created "$created"
# One reference, weir:VERSION: `podman load` names the image after it
# (localhost/weir:VERSION).
umoci tag --image "$layout:$version" "weir:$version"
umoci rm --image "$layout:$version"
umoci gc --layout "$layout"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
    -C "$layout" -cf "$dist/weir-$version-oci.tar" .

(cd "$dist" && sha256sum "$name.tar.gz" "weir-$version-oci.tar" >SHA256SUMS)
step "done"
ls -l "$dist/$name.tar.gz" "$dist/weir-$version-oci.tar" "$dist/SHA256SUMS"
cat "$dist/SHA256SUMS"
