#!/bin/sh
# Installs the Debian packages that ilpd's build, tests and `make run` need,
# skipping what is already there.
#   scripts/make/install-deps.sh          as root: installs what is missing;
#                                         otherwise: prints what is missing and
#                                         the command that installs it (no sudo)
#   scripts/make/install-deps.sh --sudo   installs what is missing, with sudo
#                                         when not root (`make run`, `make deps`)
# `make test` and .ci/run use the first form, so a test run never asks for a
# password. Exit status: 0 unless an installation was tried and failed.
set -e
use_sudo=0
case "${1:-}" in
    --sudo) use_sudo=1 ;;
    "") ;;
    *) echo "usage: $0 [--sudo]" >&2; exit 2 ;;
esac
PKGS="gcc make pkg-config libmicrohttpd-dev libcjson-dev libb64-dev libpcre2-dev libssl-dev
python3 python3-numpy python3-locust curl systemd"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
# Node.js may come from another packaging that already bundles npm.
command -v npm >/dev/null 2>&1 || missing="$missing nodejs npm"
[ -z "$missing" ] && exit 0
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if [ "$use_sudo" -eq 0 ]; then
        echo "install-deps: not root, installing nothing; missing Debian packages:$missing" >&2
        echo "install-deps: install them with: sudo apt-get install -y --no-install-recommends$missing" >&2
        echo "install-deps: (or run scripts/make/install-deps.sh --sudo, or make deps); tests that need them fail or skip" >&2
        exit 0
    fi
    SUDO="sudo"
fi
echo "installing:$missing" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >&2
