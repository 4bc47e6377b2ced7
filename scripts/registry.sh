#!/usr/bin/env bash
# Makes sure Debian's docker-registry (the CNCF distribution registry) is
# installed, for the OCI tests (host/tests/oci.rs), which start their own
# registry on a loopback port with a config and storage of their own.
# Installs only when missing; never starts or enables a system service.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ensure_pkg registry.sh \
    "docker-registry not found and no apt-get; install the CNCF distribution registry (Debian: docker-registry)" \
    docker-registry docker-registry
