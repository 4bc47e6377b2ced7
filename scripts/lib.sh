# Helpers shared by the scripts here; `source` it, do not run it.

# ensure_pkg WHO HINT "COMMAND..." PACKAGE...: returns at once when every
# COMMAND is on PATH; otherwise installs the Debian PACKAGEs with apt-get
# (as root, else with sudo) and fails unless the commands are there then.
# Without apt-get it fails, saying "WHO: HINT". Never starts or enables a
# system service: a policy-rc.d answering 101 keeps the packages' postinst
# from starting one (the tests run their own on loopback ports).
ensure_pkg() {
    local who=$1 hint=$2 commands=$3 command
    shift 3
    local missing=
    for command in $commands; do
        command -v "$command" >/dev/null || missing=1
    done
    [ -n "$missing" ] || return 0
    if ! command -v apt-get >/dev/null; then
        echo "$who: $hint" >&2
        return 1
    fi
    local sudo=
    [ "$(id -u)" = 0 ] || sudo=sudo
    echo "$who: installing $* (Debian packages)" >&2
    $sudo apt-get update -qq
    local policy=/usr/sbin/policy-rc.d placed=
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
        $sudo chmod +x "$policy"
        placed=1
        # Also when the install fails or is interrupted.
        trap "$sudo rm -f $policy" EXIT
    fi
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
    if [ -n "$placed" ]; then
        $sudo rm -f "$policy"
        trap - EXIT
    fi
    for command in $commands; do
        command -v "$command" >/dev/null || {
            echo "$who: $command is still missing after installing $*" >&2
            return 1
        }
    done
}
