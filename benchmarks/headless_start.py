"""Headless kernel start: Sandboxed Python against python3 with no Jupyter server running.

What nbconvert, nbclient, papermill and a plain jupyter_client script do: jupyter_client's
AsyncKernelManager starts the kernelspec's command, and the time is taken from
``start_kernel()`` until ``wait_for_ready()`` sees the first ``kernel_info_reply``. Kinds,
interleaved ``--runs`` times (python3, runc, runsc, python3, ...) so machine noise hits all
alike:

- ``python3``: the local ipykernel of this interpreter;
- ``runc``, ``runsc``: the ``sandboxed-python`` kernelspec of this checkout (its launcher,
  not a copy installed elsewhere) with ``JUPYTER_SANDBOX_RUNTIME`` set, no server; the headless
  warm pool (sandbox/lifecycle/pool_keeper.py) on, with its zygote, unless ``--cold`` turns the
  pool off or ``--no-zygote`` the zygote (``HeadlessPool.fast_kernel_start``). Its settings and
  state are private to the run (a config directory of its own; ``JUPYTER_RUNTIME_DIR`` a
  directory of its own, holding the state directory where its default puts it, which is where
  the launcher looks for the pool's zygote), and everything it made is removed at the end.

Each kernel starts in the same empty directory (a notebook's folder, as nbconvert would use).
With the pool, a runtime's first kernel misses it and the next ones claim a member if the
keeper has refilled it in time; the p50 is that steady state, the p90 shows the misses.

Shutting a kernel down is not timed. Prints p50 and p90 of each and the ratio of each p50 to
python3's, against the targets of issue 36 (runc <= 1.0x, runsc <= 1.5x). From the checkout:

    .venv/bin/python benchmarks/headless_start.py --runs 10 [--cold | --no-zygote] [--json F]
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager

# Run as a script from benchmarks/, whose directory is on sys.path.
from timing import Summary, against_local, against_targets, print_against_targets
from traitlets.config import Config

from jupyter_sandbox.sandbox.lifecycle.pool_keeper import stop_keeper
from jupyter_sandbox.sandbox.manager import SandboxManager, default_owner

KINDS = ("local", "runc", "runsc")
TARGETS = {"runc": 1.0, "runsc": 1.5}  # at most this many times python3's p50
PURPOSE = "benchmark"
KERNELSPECS = Path(__file__).resolve().parents[1] / "kernelspec"  # the checkout's launcher


COLD = "--cold" in sys.argv  # read here: timing.against_local parses only its own options
if COLD:
    sys.argv.remove("--cold")
ZYGOTE = "--no-zygote" not in sys.argv
if not ZYGOTE:
    sys.argv.remove("--no-zygote")


async def time_kernel(kind: str, folder: Path, config_dir: Path, runtime_dir: Path) -> float:
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(config_dir), JUPYTER_RUNTIME_DIR=str(runtime_dir))
    if kind == "local":
        km = AsyncKernelManager(kernel_name="python3")
    else:
        env |= {
            "JUPYTER_SANDBOX_RUNTIME": kind,
            "JUPYTER_SANDBOX_PURPOSE": PURPOSE,
        }
        km = AsyncKernelManager(
            kernel_name="sandboxed-python",
            kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(KERNELSPECS)]),
        )
    start = time.perf_counter()
    try:
        await km.start_kernel(env=env, cwd=str(folder))
        kc = km.client()
        kc.start_channels()
        try:
            await kc.wait_for_ready(timeout=120)
            return time.perf_counter() - start
        finally:
            kc.stop_channels()
    finally:
        if km.has_kernel:
            await km.shutdown_kernel()


async def measure(runs: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {kind: [] for kind in KINDS}
    folder = Path(tempfile.mkdtemp(prefix="jsbx-", dir="/tmp"))
    runtime_dir = Path(tempfile.mkdtemp(prefix="jsbx-", dir="/tmp"))
    state_dir = runtime_dir / "sandboxes"  # SandboxSettings.state_dir's default place
    config_dir = Path(tempfile.mkdtemp(prefix="jsbx-", dir="/tmp"))
    config = Config()
    config.SandboxSettings.state_dir = str(state_dir)
    config.HeadlessPool.enabled = not COLD
    config.HeadlessPool.fast_kernel_start = ZYGOTE
    (config_dir / "jupyter_sandbox_config.py").write_text(
        f"c.SandboxSettings.state_dir = {str(state_dir)!r}\n"
        f"c.HeadlessPool.enabled = {not COLD!r}\n"
        f"c.HeadlessPool.fast_kernel_start = {ZYGOTE!r}\n"
    )
    try:
        for run in range(1, runs + 1):
            for kind in KINDS:
                samples[kind].append(await time_kernel(kind, folder, config_dir, runtime_dir))
            times = ", ".join(f"{kind} {samples[kind][-1] * 1000:.0f} ms" for kind in KINDS)
            print(f"run {run}/{runs}: {times}", file=sys.stderr, flush=True)
    finally:
        stop_keeper(state_dir, default_owner())
        manager = SandboxManager.from_config(config)
        try:
            for info in await manager.list_sandboxes(default_owner()):
                if Path(info.host_dir).parent == state_dir:
                    await manager.remove(default_owner(), info.sandbox_id)
        finally:
            await manager.close()
        for path in (folder, state_dir, runtime_dir, config_dir):
            shutil.rmtree(path, ignore_errors=True)
    return samples


def summarize(samples: dict[str, list[float]]) -> Summary:
    return against_targets(samples, TARGETS)


def print_table(summary: Summary, runs: int) -> None:
    title = f"headless start_kernel -> kernel ready, no server, {runs} interleaved runs each"
    option = " (--cold)" if COLD else "" if ZYGOTE else " (--no-zygote)"
    print_against_targets(summary, title + option)


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
