"""Startup latency of a sandbox's kernel under runc and runsc, against a plain local ipykernel.

Measured, ``--runs`` times each and interleaved (runc, runsc, local, runc, ...) so machine noise
hits all three alike:

- runc, runsc: ``SandboxManager.create`` until it returns, i.e. from "create sandbox" until the
  in-sandbox kernel has answered ``kernel_info`` (container creation and start included);
- local: a ``python3`` ipykernel of this interpreter started with jupyter_client's
  AsyncKernelManager, until ``wait_for_ready`` sees its first ``kernel_info_reply``.

Removing a sandbox or shutting down a kernel is not timed; each is done right after its
measurement, also on error or Ctrl-C. Prints median and p90 of each, the ratio of each sandbox's
median to the local kernel's, and whether the targets (runc <= 1.3x, runsc <= 2.5x) are met.
Needs the Docker engine with both runtimes and the sandbox image. From the checkout:

    .venv/bin/python benchmarks/startup.py --runs 10 [--json startup.json]
"""

from __future__ import annotations

import sys
import time

from jupyter_client.manager import AsyncKernelManager

# Run as a script from benchmarks/, whose directory is on sys.path.
from timing import Summary, against_local, against_targets, print_against_targets

from jupyter_sandbox.sandbox.manager import SandboxManager

OWNER = "benchmark"
PURPOSE = "benchmark"
KINDS = ("runc", "runsc", "local")
TARGETS = {"runc": 1.3, "runsc": 2.5}  # at most this many times the local kernel's median


async def time_sandbox(manager: SandboxManager, runtime: str) -> float:
    start = time.perf_counter()
    sandbox = await manager.create(OWNER, runtime=runtime, purpose=PURPOSE)  # removes on failure
    try:
        return time.perf_counter() - start
    finally:
        await manager.remove(OWNER, sandbox.sandbox_id)


async def time_local_kernel() -> float:
    km = AsyncKernelManager(kernel_name="python3")
    start = time.perf_counter()
    try:
        await km.start_kernel()
        kc = km.client()
        kc.start_channels()
        try:
            await kc.wait_for_ready(timeout=60)
            return time.perf_counter() - start
        finally:
            kc.stop_channels()
    finally:
        if km.has_kernel:
            await km.shutdown_kernel(now=True)


async def time_startup(manager: SandboxManager, kind: str) -> float:
    if kind == "local":
        return await time_local_kernel()
    return await time_sandbox(manager, kind)


async def measure(runs: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {kind: [] for kind in KINDS}
    manager = SandboxManager.from_config()
    try:
        for run in range(1, runs + 1):
            for kind in KINDS:
                samples[kind].append(await time_startup(manager, kind))
            times = ", ".join(f"{kind} {samples[kind][-1] * 1000:.0f} ms" for kind in KINDS)
            print(f"run {run}/{runs}: {times}", file=sys.stderr, flush=True)
    finally:
        await manager.close()
    return samples


def summarize(samples: dict[str, list[float]]) -> Summary:
    return against_targets(samples, TARGETS)


def print_table(summary: Summary, runs: int) -> None:
    print_against_targets(summary, f"create -> kernel ready, {runs} interleaved runs each")


def main() -> int:
    return against_local(
        __doc__,
        runs_help="runs of each kind (default 10)",
        measure=measure,
        summarize=summarize,
        print_table=print_table,
    )


if __name__ == "__main__":
    sys.exit(main())
