"""How long removing a sandbox takes while commands are being started in it.

As an owner's DELETE during a flood of commands does (sandbox/backends/docker/removal.py,
exec_gate.py).

For each runtime and run: a sandbox with twenty ``sleep 60`` commands running, then
``--starters`` loops that start unsupervised ``true`` one after another until the sandbox is
gone; half a second later the removal is asked for and timed until it returns. Each run is made
twice, interleaved:

- ``removal``: as the removal is;
- ``removal, no engine wait``: without its wait for every exec the engine has for the
  container to have a process (``wait_for_exec_processes``), as it was before: only the
  starts this process has in hand are waited for.

Prints the median and p90 of each, in milliseconds (a run the engine held up shows as a p90 of
tens of seconds). Needs the Docker engine and the image:

    .venv/bin/python benchmarks/removal.py --runtime runsc --runs 6
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from timing import per_runtime

from jupyter_sandbox.protocol.errors import SandboxError
from jupyter_sandbox.sandbox.backends.base import ExecOptions
from jupyter_sandbox.sandbox.backends.docker import removal
from jupyter_sandbox.sandbox.manager import SandboxManager

OWNER = "benchmark"
PURPOSE = "benchmark:removal"
RUNNING = 20  # commands running in the sandbox when it is removed
STARTERS = 12  # loops starting commands while it is removed
WITH_WAIT = "removal"
WITHOUT_WAIT = "removal, no engine wait"
NAMES = [WITH_WAIT, WITHOUT_WAIT]
# Counts the sandbox's `sleep 60` processes (the image has no ps).
COUNT_SLEEPS = (
    "import os\n"
    "print(sum(open(f'/proc/{p}/cmdline', 'rb').read() == b'sleep\\x0060\\x00'\n"
    "          for p in os.listdir('/proc') if p.isdigit()))"
)


async def removal_time(manager: SandboxManager, runtime: str) -> float:
    """Seconds the removal of a sandbox full of commands takes while more are being started."""
    sandbox = await manager.create(OWNER, runtime=runtime, purpose=PURPOSE)
    sandbox_id = sandbox.sandbox_id
    running = [
        asyncio.ensure_future(
            manager.backend.exec(sandbox_id, ["sleep", "60"], ExecOptions(timeout=90))
        )
        for _ in range(RUNNING)
    ]
    removed = asyncio.Event()

    async def keep_starting() -> None:
        while not removed.is_set():
            try:
                await manager.backend.exec(
                    sandbox_id, ["true"], ExecOptions(timeout=60, supervised=False)
                )
            except SandboxError:
                return

    starting: list[asyncio.Future[None]] = []
    try:
        deadline = time.monotonic() + 120
        while await sleeps(manager, sandbox_id) < RUNNING:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the {RUNNING} commands did not all start")
            await asyncio.sleep(0.5)
        starting = [asyncio.ensure_future(keep_starting()) for _ in range(STARTERS)]
        await asyncio.sleep(0.5)
        began = time.perf_counter()
        await manager.remove(OWNER, sandbox_id)
        return time.perf_counter() - began
    finally:
        removed.set()
        await asyncio.gather(*running, *starting, return_exceptions=True)
        with contextlib.suppress(SandboxError):  # gone already, unless something failed
            await manager.remove(OWNER, sandbox_id)


async def sleeps(manager: SandboxManager, sandbox_id: str) -> int:
    listed = await manager.backend.exec(
        sandbox_id,
        ["/opt/sandbox/bin/python3", "-I", "-c", COUNT_SLEEPS],
        ExecOptions(timeout=60, supervised=False),
    )
    return int(listed.stdout.decode().strip() or 0)


async def measure(runtime: str, runs: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {name: [] for name in NAMES}
    manager = SandboxManager.from_config()
    waits = removal.wait_for_exec_processes
    try:
        for _ in range(runs):
            samples[WITH_WAIT].append(await removal_time(manager, runtime))
            removal.wait_for_exec_processes = lambda api, container, wait=0.0: None  # type: ignore[assignment]
            try:
                samples[WITHOUT_WAIT].append(await removal_time(manager, runtime))
            finally:
                removal.wait_for_exec_processes = waits  # type: ignore[assignment]
    finally:
        await manager.close()
    return samples


def main() -> None:
    per_runtime(
        __doc__,
        title=(
            f"removing a sandbox with {RUNNING} commands running while {STARTERS} loops start "
            "more, {runs} runs of each"
        ),
        column="removal",
        names=NAMES,
        runs_help="removals of each kind",
        measure=measure,
        streamed=("", 0),
    )


if __name__ == "__main__":
    main()
