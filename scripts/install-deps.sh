#!/bin/sh
# Installs what profhost needs to build, test and run its demo on Debian 12.
# Everything comes from Debian's archive but speedscope (npm's registry),
# which a test drives. Run it as root, or as a user who may use sudo: it
# asks sudo only when it is not root already (a fresh Debian container has
# no sudo, and needs none there).
set -eu
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        exec sudo sh "$0" "$@"
    fi
    echo "install-deps.sh: needs root to install packages: run it as root, or install sudo" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends \
    build-essential cmake pkg-config binutils \
    liblua5.4-dev lua5.4 lua-busted \
    libcjson-dev libunwind-dev zlib1g-dev \
    liblua5.1-0-dev \
    python3 python3-torch libtorch-dev ninja-build \
    chromium \
    nodejs
# npm: Debian's, unless the nodejs installed brings its own (NodeSource's).
command -v npm >/dev/null 2>&1 || apt-get install -y --no-install-recommends npm
# speedscope's own importer reads trace.json in tests/e2e/test_formats.py.
npm install -g speedscope@1.25.0
