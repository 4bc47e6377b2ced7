#!/usr/bin/env bash
# Makes sure Debian's docker-registry (the CNCF distribution registry) is
# installed, for the OCI tests (host/tests/oci.rs), which start their own
# registry on a loopback port with a config and storage of their own.
# Installs only when missing; never starts or enables a system service.
set -euo pipefail

if command -v docker-registry >/dev/null; then
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "registry.sh: docker-registry not found and no apt-get; install the CNCF distribution registry (Debian: docker-registry)" >&2
    exit 1
fi
SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo
echo "registry.sh: installing docker-registry (Debian package)" >&2
$SUDO apt-get update -qq
# policy-rc.d 101: the package's postinst must not start a system registry
# on :5000 (the tests run their own).
POLICY=/usr/sbin/policy-rc.d
if [ ! -e "$POLICY" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null
    $SUDO chmod +x "$POLICY"
    trap '$SUDO rm -f "$POLICY"' EXIT
fi
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq docker-registry >/dev/null
command -v docker-registry >/dev/null
