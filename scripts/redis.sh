#!/usr/bin/env bash
# Makes sure Debian's redis-server and redis-cli (Redis 7: sharded pub/sub)
# are installed, for the cluster tests (host/tests/cluster.rs), which start
# their own servers on loopback ports. Installs only when missing; never
# starts or enables a system service.
set -euo pipefail

if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "redis.sh: redis-server not found and no apt-get; install Redis 7 (redis-server, redis-cli)" >&2
    exit 1
fi
SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo
echo "redis.sh: installing redis-server and redis-tools (Debian packages)" >&2
$SUDO apt-get update -qq
# policy-rc.d 101: the package's postinst must not start a system Redis on
# 6379 (the tests run their own).
POLICY=/usr/sbin/policy-rc.d
if [ ! -e "$POLICY" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null
    $SUDO chmod +x "$POLICY"
    trap '$SUDO rm -f "$POLICY"' EXIT
fi
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server redis-tools >/dev/null
command -v redis-server >/dev/null
