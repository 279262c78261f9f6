"""How much a process's memory grew while something ran: what a test of a bound on host
memory measures (the server runs in the test's process, pytest-jupyter)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path


@contextlib.contextmanager
def peak_growth() -> Iterator[Callable[[], int]]:
    """How much this process's resident memory grew at most while the block ran (bytes),
    sampled every 10 ms on a thread."""

    def resident() -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS in /proc/self/status")

    start, peak, done = resident(), [0], threading.Event()

    def sample() -> None:
        while not done.wait(0.01):
            peak[0] = max(peak[0], resident() - start)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield lambda: peak[0]
    finally:
        done.set()
        sampler.join()
