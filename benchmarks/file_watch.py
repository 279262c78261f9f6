"""How soon a directory watch (SandboxFiles.watch, what ``GET .../files/watch`` streams) sees a
change: for each runtime, one sandbox, one watch of /workspace/w, and ``--runs`` writes of a
file there by a command in the sandbox, each after a random pause (so that the writes fall
anywhere in the watcher's 0.2 s between two looks).

Each write is timed two ways: from the file's modification time (the sandbox's clock, which
is the host's) to the change's arrival on the host, which is the watch's own latency; and from
the end of the command that wrote it (the engine's exec, ~0.1 s of its own) to the arrival,
which is what a caller that wrote through the API waits for beyond its own call. Prints the
median and p90 in milliseconds. Needs the engine and the image:

    .venv/bin/python benchmarks/file_watch.py --runtime runc --runtime runsc --runs 20
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import random
import statistics
import time

from timing import p90

from jupyter_sandbox.sandbox.manager import SandboxManager

OWNER = "benchmark"
PURPOSE = "benchmark:file-watch"


def seconds(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp).timestamp()


async def measure(runtime: str, runs: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {"write to seen": [], "write's call end to seen": []}
    manager = SandboxManager.from_config()
    sandbox = await manager.create(OWNER, runtime=runtime, purpose=PURPOSE)
    sandbox_id = sandbox.sandbox_id
    try:
        await manager.exec(OWNER, sandbox_id, ["mkdir", "/workspace/w"])
        events = manager.files.watch(OWNER, sandbox_id, "w")
        try:
            name, _ = await events.__anext__()
            assert name == "ready", name
            for run in range(runs):
                await asyncio.sleep(random.uniform(0.0, 0.3))
                script = f"echo {run} > /workspace/w/f"
                await manager.exec(OWNER, sandbox_id, ["sh", "-c", script])
                called = time.time()
                name, change = await asyncio.wait_for(events.__anext__(), 30)
                seen = time.time()
                assert name == "change", (name, change)
                samples["write to seen"].append(seen - seconds(change["entry"]["modified"]))
                samples["write's call end to seen"].append(seen - called)
        finally:
            await events.aclose()
    finally:
        await manager.remove(OWNER, sandbox_id)
        await manager.close()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", action="append", choices=["runc", "runsc"])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    print(f"{'runtime':<8} {'measure':<26} {'median ms':>10} {'p90 ms':>8}")
    for runtime in args.runtime or ["runc", "runsc"]:
        for name, values in asyncio.run(measure(runtime, args.runs)).items():
            median, high = statistics.median(values) * 1000, p90(values) * 1000
            print(f"{runtime:<8} {name:<26} {median:>10.0f} {high:>8.0f}")


if __name__ == "__main__":
    main()
