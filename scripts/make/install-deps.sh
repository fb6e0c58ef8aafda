#!/bin/sh
# Installs the Debian packages that ilpd's build, tests and `make run` need,
# skipping what is already there. Needs root (or sudo).
set -e
PKGS="gcc make pkg-config libmicrohttpd-dev libcjson-dev libb64-dev libpcre2-dev libssl-dev
python3 python3-numpy python3-locust curl systemd"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
# Node.js may come from another packaging that already bundles npm.
command -v npm >/dev/null 2>&1 || missing="$missing nodejs npm"
[ -z "$missing" ] && exit 0
echo "installing:$missing" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >&2
