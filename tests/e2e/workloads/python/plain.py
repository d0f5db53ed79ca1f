"""A plain Python script: no torch, no profhost. It computes for a while and
reports which of the modules the host could have loaded are loaded."""
import sys
import time

t0 = time.monotonic()
acc = 0
while time.monotonic() - t0 < 0.3:
    acc += sum(range(1000))
loaded = sorted(m for m in ("torch", "ctypes", "threading", "profhost._bridge")
                if m in sys.modules)
print("modules:", ",".join(loaded) or "-")
