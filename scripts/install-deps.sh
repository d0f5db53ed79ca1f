#!/bin/sh
# Installs what profhost needs to build, test and run its demo on Debian 12.
# Run as root (or through sudo). Everything comes from Debian's archive but
# speedscope (npm's registry), which a test drives.
set -eu
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends \
    build-essential cmake pkg-config binutils \
    liblua5.4-dev lua5.4 lua-busted \
    libcjson-dev libunwind-dev zlib1g-dev \
    liblua5.1-0-dev \
    python3 python3-torch \
    chromium \
    nodejs
# npm: Debian's, unless the nodejs installed brings its own (NodeSource's).
command -v npm >/dev/null 2>&1 || apt-get install -y --no-install-recommends npm
# speedscope's own importer reads trace.json in tests/e2e/test_formats.py.
npm install -g speedscope@1.25.0
