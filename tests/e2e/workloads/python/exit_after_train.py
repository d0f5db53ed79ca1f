"""Runs examples/train.py's main() with the given arguments, then exits with
the status given first: the exit status must come through the host as is."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "examples"))
import train  # noqa: E402

status = int(sys.argv[1])
train.main(sys.argv[2:])
sys.exit(status)
