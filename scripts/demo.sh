#!/bin/sh
# Builds profhost and profiles a small PyTorch training loop with it.
# The launcher prints where the windows were written.
set -eu
cd "$(dirname "$0")/.."
sh scripts/build.sh build >/dev/null
echo "profhost: running examples/quickstart.py under prof run"
exec build/bin/prof run -s examples/profile.lua -o prof_out -- /usr/bin/python3 examples/quickstart.py
