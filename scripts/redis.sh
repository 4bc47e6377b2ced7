#!/usr/bin/env bash
# Makes sure Debian's redis-server and redis-cli (Redis 7: sharded pub/sub)
# are installed, for the cluster tests (host/tests/cluster.rs), which start
# their own servers on loopback ports. Installs only when missing; never
# starts or enables a system service.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ensure_pkg redis.sh \
    "redis-server not found and no apt-get; install Redis 7 (redis-server, redis-cli)" \
    "redis-server redis-cli" redis-server redis-tools
