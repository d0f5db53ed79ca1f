"""A data-loader-bound training loop for the report tests.

Each step waits DATA_MS in a DataLoader-like __next__ (time.sleep, as a
loader starved of workers does), then spins in forward, backward and
optimizer phases. The phases are marked the way profhost's Python bridge
marks them: ranges named data / forward / backward / optimizer inside the
step, and DataLoader.__next__ inside data.

    python3 loader_loop.py STEPS DATA_MS
"""
import sys
import time

import profhost


def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class Loader:
    def __init__(self, data_ms):
        self.data_ms = data_ms

    def __iter__(self):
        return self

    def __next__(self):
        with profhost.range("DataLoader.__next__"):
            time.sleep(self.data_ms / 1000.0)
        return [1.0] * 16


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    data_ms = float(sys.argv[2]) if len(sys.argv) > 2 else 8.0
    loader = iter(Loader(data_ms))
    for _ in range(steps):
        with profhost.range("data"):
            batch = next(loader)
        with profhost.range("forward"):
            spin(0.001)
        with profhost.range("backward"):
            spin(0.0015)
        with profhost.range("optimizer"):
            spin(0.0005)
        profhost.step()
    print("done %d" % steps, flush=True)


if __name__ == "__main__":
    main()
