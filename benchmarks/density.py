"""Host memory per idle sandbox, and how many idle sandboxes this machine holds.

Two measurements, for each ``--runtime``:

1. memory: host memory in use (MemTotal - MemAvailable from /proc/meminfo, so page cache that
   the kernel can drop does not count) before and after starting ``--sample`` idle sandboxes,
   settled for 5 s; divided by their number. This counts everything a sandbox costs the host:
   container processes, gVisor's sentry and gofer, the shim, tmpfs pages.
2. capacity: sandboxes are started in batches of ``--batch``; after each batch every sandbox's
   kernel is sent ``kernel_info_request`` and the slowest reply is recorded. It stops at the
   first batch in which some kernel takes longer than ``--deadline`` seconds (default 1), when
   less than 10% of memory is left, or at ``--max`` sandboxes. The figure is the last count at
   which every kernel answered in time.

Everything is removed at the end, also on error or Ctrl-C. From the checkout:

    .venv/bin/python benchmarks/density.py --runtime runsc --runtime runc [--max 200]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from jupyter_client.asynchronous.client import AsyncKernelClient

from jupyter_sandbox.sandbox.manager import Sandbox, SandboxManager

OWNER = "benchmark"
PURPOSE = "benchmark"


def meminfo() -> dict[str, int]:
    fields = {}
    with open("/proc/meminfo") as f:
        for line in f:
            name, value = line.split(":", 1)
            fields[name] = int(value.split()[0]) * 1024
    return fields


def memory_in_use() -> int:
    info = meminfo()
    return info["MemTotal"] - info["MemAvailable"]


async def start(manager: SandboxManager, runtime: str, count: int) -> list[Sandbox]:
    # One at a time: on 2 cores, parallel starts only queue behind each other.
    return [
        await manager.create(OWNER, runtime=runtime, purpose=PURPOSE, limits={"memory": "512m"})
        for _ in range(count)
    ]


async def slowest_reply(clients: list[AsyncKernelClient]) -> float:
    slowest = 0.0
    for client in clients:
        began = time.perf_counter()
        client.kernel_info()
        await client.get_shell_msg(timeout=30)
        slowest = max(slowest, time.perf_counter() - began)
    return slowest


def client_for(sandbox: Sandbox) -> AsyncKernelClient:
    client = AsyncKernelClient()
    client.load_connection_info(sandbox.connection_info)
    client.start_channels(shell=True, iopub=False, stdin=False, hb=False, control=False)
    return client


async def measure(
    runtime: str, sample: int, batch: int, limit: int, deadline: float
) -> dict[str, Any]:
    manager = SandboxManager.from_config()
    manager.quotas.max_sandboxes, manager.quotas.max_memory, manager.quotas.max_cpus = 0, "", 0
    sandboxes: list[Sandbox] = []
    clients: list[AsyncKernelClient] = []
    try:
        before = memory_in_use()
        sandboxes += await start(manager, runtime, sample)
        await asyncio.sleep(5)
        per_sandbox = (memory_in_use() - before) / sample
        print(f"{runtime}: {per_sandbox / 2**20:.0f} MiB per idle sandbox", file=sys.stderr)

        clients = [client_for(s) for s in sandboxes]
        held, slowest = 0, 0.0
        while len(sandboxes) < limit:
            slowest = await slowest_reply(clients)
            print(
                f"{runtime}: {len(sandboxes)} sandboxes, slowest reply {slowest * 1000:.0f} ms",
                file=sys.stderr,
            )
            if slowest > deadline:
                break
            held = len(sandboxes)
            info = meminfo()
            if info["MemAvailable"] < info["MemTotal"] * 0.10:
                break
            new = await start(manager, runtime, min(batch, limit - len(sandboxes)))
            sandboxes += new
            clients += [client_for(s) for s in new]
        else:
            slowest = await slowest_reply(clients)
            held = len(sandboxes) if slowest <= deadline else held
        return {"runtime": runtime, "mib_per_sandbox": per_sandbox / 2**20, "held": held,
                "stopped_at": len(sandboxes), "slowest_ms": slowest * 1000}  # fmt: skip
    finally:
        for client in clients:
            client.stop_channels()
        for sandbox in sandboxes:
            await manager.remove(OWNER, sandbox.sandbox_id)
        await manager.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runtime", action="append", choices=("runsc", "runc"))
    parser.add_argument("--sample", type=int, default=5, help="sandboxes for the memory figure")
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--max", type=int, default=150)
    parser.add_argument("--deadline", type=float, default=1.0, help="seconds")
    args = parser.parse_args()
    rows = [
        asyncio.run(measure(runtime, args.sample, args.batch, args.max, args.deadline))
        for runtime in args.runtime or ["runsc", "runc"]
    ]
    total = meminfo()["MemTotal"] / 2**30
    print(
        f"\nidle sandboxes on this host ({total:.0f} GiB), kernel_info within {args.deadline:g} s"
    )
    print(f"{'runtime':8}{'MiB each':>10}{'held':>8}{'tried':>8}{'slowest ms':>12}")
    for row in rows:
        print(
            f"{row['runtime']:8}{row['mib_per_sandbox']:10.0f}{row['held']:8}"
            f"{row['stopped_at']:8}{row['slowest_ms']:12.0f}"
        )


if __name__ == "__main__":
    main()
