#!/usr/bin/env bash
# build-uws-cpp.sh: builds the C++ uWebSockets peer (peers/cpp/uws-server.cpp),
# the yardstick for weir's own CPU per message, into $OUT (default
# $CARGO_TARGET_DIR/uws-cpp/uws-cpp, where compare.sh and profile.sh look).
#
# uWebSockets and uSockets are in no package registry: fetch them yourself,
# outside this repository, and say where with
#   UWS_CPP_SRC    a uNetworking/uWebSockets tree (has src/App.h)
#   USOCKETS_SRC   a uNetworking/uSockets tree (has src/libusockets.h;
#                  default $UWS_CPP_SRC/uSockets if that has the sources)
# e.g. git clone https://github.com/uNetworking/uWebSockets /work/uws-src/uWebSockets
#      git clone https://github.com/uNetworking/uSockets /work/uws-src/uSockets
# Build: -O3 -flto, epoll (uSockets' default on Linux), no TLS (LIBUS_NO_SSL),
# no zlib (UWS_NO_ZLIB: the peer never compresses). Needs gcc/g++ (C++20).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
src="${UWS_CPP_SRC:?set UWS_CPP_SRC to a uNetworking/uWebSockets tree}"
us="${USOCKETS_SRC:-$src/uSockets}"
[ -f "$src/src/App.h" ] || { echo "UWS_CPP_SRC=$src has no src/App.h" >&2; exit 2; }
[ -f "$us/src/libusockets.h" ] || { echo "USOCKETS_SRC=$us has no src/libusockets.h (set USOCKETS_SRC)" >&2; exit 2; }
out="${OUT:-${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}/uws-cpp/uws-cpp}"
CC="${CC:-gcc}" CXX="${CXX:-g++}"
obj="$(mktemp -d /tmp/uws-cpp-build.XXXXXX)"
trap 'rm -rf "$obj"' EXIT
flags=(-O3 -flto=auto -DNDEBUG -DLIBUS_NO_SSL -DUWS_NO_ZLIB)
for c in "$us"/src/*.c "$us"/src/eventing/*.c "$us"/src/crypto/*.c; do
  [ -f "$c" ] || continue
  "$CC" "${flags[@]}" -std=c11 -I"$us/src" -c "$c" -o "$obj/$(basename "${c%.c}").o"
done
mkdir -p "$(dirname "$out")"
"$CXX" "${flags[@]}" -std=c++20 -I"$src/src" -I"$us/src" "$here/cpp/uws-server.cpp" "$obj"/*.o \
  -pthread -o "$out"
echo "built $out ($(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo "uWebSockets snapshot"))"
