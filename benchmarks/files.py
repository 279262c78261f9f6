"""What the files of a running sandbox cost through SandboxManager.files (the REST files routes
and Lab's Files section call it): write and read of a file, each a program run in the sandbox
through an engine exec, against copying the same bytes on the host.

For each runtime, one sandbox; ``--runs`` of each operation, interleaved, timed from the call to
its result:

- ``list``: the entries of /workspace (a few files): the fixed cost of one operation;
- ``write`` / ``read`` of 1 KiB and of ``--size`` MiB (random bytes, checked on the way back);
- ``host copy``: the same ``--size`` MiB written to a file on the host and read back
  (page cache; what the bytes cost without a sandbox, informational).

Prints medians and p90 in milliseconds, and MB/s for the big file. Needs the engine and the image:

    .venv/bin/python benchmarks/files.py --runtime runc --runtime runsc --size 50 --runs 10
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

from timing import p90

from jupyter_sandbox.sandbox.manager import SandboxManager

OWNER = "benchmark"
PURPOSE = "benchmark:files"


async def timed(samples: list[float], action: Callable[[], Awaitable[Any]]) -> Any:
    start = time.perf_counter()
    result = await action()
    samples.append(time.perf_counter() - start)
    return result


def host_copy(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "copy.bin")
        with open(path, "wb") as out:
            out.write(data)
        with open(path, "rb") as back:
            if back.read() != data:
                raise RuntimeError("the host copy differs")


async def measure(runtime: str, megabytes: int, runs: int) -> dict[str, list[float]]:
    small, big = os.urandom(1024), os.urandom(megabytes << 20)
    names = ("list", "write 1 KiB", "read 1 KiB", f"write {megabytes} MiB", f"read {megabytes} MiB")
    samples: dict[str, list[float]] = {name: [] for name in (*names, "host copy")}
    manager = SandboxManager.from_config()
    manager.files.max_bytes = max(manager.files.max_bytes, len(big))
    files = manager.files
    try:
        sandbox = await manager.create(OWNER, runtime=runtime, purpose=PURPOSE)
        sid = sandbox.sandbox_id
        try:
            for run in range(runs + 1):  # the first of each warms up: not counted
                counted: dict[str, list[float]] = samples if run else {n: [] for n in samples}
                await timed(counted["write 1 KiB"], lambda: files.write(OWNER, sid, "s.bin", small))
                got = await timed(counted["read 1 KiB"], lambda: files.read(OWNER, sid, "s.bin"))
                await timed(counted[names[3]], lambda: files.write(OWNER, sid, "b.bin", big))
                back = await timed(counted[names[4]], lambda: files.read(OWNER, sid, "b.bin"))
                await timed(counted["list"], lambda: files.list(OWNER, sid))
                await timed(counted["host copy"], lambda: asyncio.to_thread(host_copy, big))
                if got != small or back != big:
                    raise RuntimeError("a file came back different")
        finally:
            await manager.remove(OWNER, sid)
    finally:
        await manager.close()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runtime", action="append", choices=("runc", "runsc"))
    parser.add_argument("--size", type=int, default=50, help="MiB of the big file (50)")
    parser.add_argument("--runs", type=int, default=10, help="runs of each operation (10)")
    args = parser.parse_args()
    if args.size < 1 or args.runs < 1:
        parser.error("--size and --runs must be at least 1")
    print(f"{'runtime':<8} {'operation':<14} {'median ms':>10} {'p90 ms':>8} {'MB/s':>7}")
    for runtime in args.runtime or ["runc", "runsc"]:
        for name, values in asyncio.run(measure(runtime, args.size, args.runs)).items():
            median = statistics.median(values)
            rate = (
                f"{(args.size << 20) / median / 1e6:>7.0f}"
                if "MiB" in name or name == "host copy"
                else ""
            )
            print(
                f"{runtime:<8} {name:<14} {median * 1000:>10.1f} {p90(values) * 1000:>8.1f} {rate}"
            )


if __name__ == "__main__":
    main()
