"""Kernel restart latency of Sandboxed Python under runc and runsc, against a plain local ipykernel.

What a JupyterLab user waits for after "Restart Kernel" (and agent code after
``restart_kernel``): from the restart's start until a cell sent right after it has its
execute_reply. One kernel of each kind is started and kept; each run then restarts each of them
in turn (runc, runsc, local, runc, ...), so machine noise hits all alike:

- ``graceful``: ``restart_kernel()`` as JupyterLab does it (shutdown_request, then a new kernel
  process). Sandboxed: the same sandbox, a fresh interpreter started by its supervisor.
- ``forced``: ``restart_kernel(now=True)`` (the kernel process killed, as agent code does with a
  kernel it cannot interrupt). Sandboxed: the next kernel process restarts the interpreter its
  killed predecessor used (kernel/obtaining.py), so this includes asking the old one to exit.

The kernels are shut down at the end (the sandboxes of unnamed kernels go with them), also on
error or Ctrl-C. Prints the median and p90 of each kind and mode, and each sandboxed median
against the local kernel's. Needs the Docker engine with both runtimes and the sandbox image.
From the checkout:

    .venv/bin/python benchmarks/restart.py --runs 10 [--json restart.json]
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from contextlib import AsyncExitStack

from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager

# Run as a script from benchmarks/, whose directory is on sys.path.
from timing import Summary, against_local, p90

KINDS = ("runc", "runsc", "local")
MODES = ("graceful", "forced")
TIMEOUT = 120.0  # seconds a restart may take before the run fails


async def started_kernel(kind: str, stack: AsyncExitStack) -> AsyncKernelManager:
    """A ready kernel of ``kind``, shut down when ``stack`` closes."""
    if kind == "local":
        km = AsyncKernelManager(kernel_name="python3")
        env = dict(os.environ)
    else:
        km = AsyncKernelManager(kernel_name="sandboxed-python")
        env = {
            **os.environ,
            "JUPYTER_SANDBOX_RUNTIME": kind,
            "JUPYTER_SANDBOX_PURPOSE": "benchmark",
        }
    await km.start_kernel(env=env)
    stack.push_async_callback(shut_down, km)
    await first_cell_answered(km.client())
    return km


async def shut_down(km: AsyncKernelManager) -> None:
    if km.has_kernel:
        await km.shutdown_kernel()


async def first_cell_answered(kc: AsyncKernelClient) -> None:
    """Send a cell at once and wait for its own reply (a kernel still starting holds it).

    Not ``wait_for_ready``: it takes any kernel_info_reply, including the surplus ones to the
    requests it repeated during the restart before."""
    kc.start_channels()
    try:
        reply = await kc.execute("6 * 7", reply=True, timeout=TIMEOUT)
        if reply["content"]["status"] != "ok":
            raise RuntimeError(f"the first cell after the restart failed: {reply['content']}")
    finally:
        kc.stop_channels()


async def time_restart(km: AsyncKernelManager, mode: str) -> float:
    start = time.perf_counter()
    await km.restart_kernel(now=mode == "forced")
    await first_cell_answered(km.client())
    return time.perf_counter() - start


async def measure(runs: int) -> dict[str, dict[str, list[float]]]:
    samples: dict[str, dict[str, list[float]]] = {k: {m: [] for m in MODES} for k in KINDS}
    async with AsyncExitStack() as stack:
        kernels = {kind: await started_kernel(kind, stack) for kind in KINDS}
        for run in range(1, runs + 1):
            for mode in MODES:
                for kind in KINDS:
                    samples[kind][mode].append(await time_restart(kernels[kind], mode))
            times = ", ".join(
                f"{kind} {samples[kind]['graceful'][-1] * 1000:.0f}"
                f"/{samples[kind]['forced'][-1] * 1000:.0f} ms"
                for kind in KINDS
            )
            print(f"run {run}/{runs} (graceful/forced): {times}", file=sys.stderr, flush=True)
    return samples


def summarize(samples: dict[str, dict[str, list[float]]]) -> Summary:
    summary: Summary = {}
    for kind, modes in samples.items():
        for mode, values in modes.items():
            median = statistics.median(values)
            local = statistics.median(samples["local"][mode])
            summary[f"{kind} {mode}"] = {
                "median": median,
                "p90": p90(values),
                "ratio": median / local,
            }
    return summary


def print_table(summary: Summary, runs: int) -> None:
    print(f"restart -> first cell's reply, {runs} interleaved runs each")
    print(f"{'':<15} {'median ms':>10} {'p90 ms':>8} {'vs local':>9}")
    for name, row in summary.items():
        print(
            f"{name:<15} {row['median'] * 1000:>10.0f} {row['p90'] * 1000:>8.0f}"
            f" {row['ratio']:>8.2f}x"
        )


def main() -> int:
    return against_local(
        __doc__,
        runs_help="restarts of each kind and mode",
        measure=measure,
        summarize=summarize,
        print_table=print_table,
    )


if __name__ == "__main__":
    sys.exit(main())
