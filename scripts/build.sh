#!/bin/sh
# Configures and builds profhost into ./build (or $1) with any extra CMake
# arguments after it. Prints where the build is.
set -eu
cd "$(dirname "$0")/.."
dir=${1:-build}
[ $# -gt 0 ] && shift
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)"
echo "profhost built in $dir/ (bin/prof, lib/libprofhost.so)"
