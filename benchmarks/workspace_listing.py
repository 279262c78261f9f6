"""What keeping a copy-on-write /workspace's listings current costs (sandbox/workspace/refresh.py):
for each runtime, one sandbox launched in a folder of ``FILES`` files, and ``--runs`` of each:

- ``host add to listed``: the host creates a file in the folder while a cell in the sandbox's
  kernel lists /workspace every 2 ms; from the host's write to the cell's "seen" arriving on the
  host (one clock: the host's; what it includes beyond the refresher is the kernel's relay of
  one output, about a millisecond);
- ``host remove to unlisted``: the same for a file the host removes;
- ``listdir``: one ``os.listdir('/workspace')`` in the kernel, as it measured it, with nothing
  changed since the listing before (overlayfs's cached listing);
- ``first listdir after a change``: the same, the first after the host added a file and the
  refresher dropped the cache (the listing is merged anew from both layers).

Prints the median and p90 in milliseconds, and the refresher process's resident memory. Needs the
Docker engine, the image, and root (as the refresher does):

    .venv/bin/python benchmarks/workspace_listing.py --runtime runc --runtime runsc --runs 20
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from pathlib import Path

from timing import per_runtime
from traitlets.config import Config

from jupyter_sandbox.sandbox.host.process_lock import ProcessLock
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.operations.code_runs import CodeRequest, run_code, stream_code
from jupyter_sandbox.sandbox.workspace.refresh import REFRESH_LOCK

OWNER = "benchmark"
PURPOSE = "benchmark:workspace-listing"
FILES = 200
SETTLED_SECONDS = 0.5  # after a host change, before a listing that should find it refreshed
NAMES = ["host add to listed", "host remove to unlisted", "listdir", "first listdir after a change"]
WAIT = """
import os, time
print("ready", flush=True)
while ({name!r} in os.listdir("/workspace")) != {present}:
    time.sleep(0.002)
print("seen", flush=True)
"""
LISTDIR = CodeRequest(
    "import os, time\nt = time.perf_counter()\nos.listdir('/workspace')\n"
    "print(time.perf_counter() - t)"
)


def change_on_the_host(path: Path, present: bool) -> None:
    """Add or remove ``path`` at once (timed from here; a thread would add its own delay)."""
    if present:
        path.write_text("x\n")
    else:
        path.unlink()


def notebook_folder() -> Path:
    """A notebook's folder of FILES files, readable by the sandbox's user."""
    folder = Path(tempfile.mkdtemp(prefix="jsbx-bench-", dir="/tmp"))
    folder.chmod(0o755)
    for number in range(FILES):
        (folder / f"data-{number:04}.csv").write_text("a\n")
    return folder


async def until_listed(
    manager: SandboxManager, sandbox_id: str, path: Path, present: bool
) -> float:
    """Seconds from the host's change of ``path`` (made once the cell waits) until the cell in
    the sandbox saw it."""
    changed = seen = 0.0
    code = CodeRequest(WAIT.format(name=path.name, present=present), stream=True, timeout=60)
    # Read to the run's result (a stream left early is a client gone: its run is interrupted).
    async for name, data in stream_code(manager, OWNER, sandbox_id, code):
        if name == "stdout" and "ready" in data["text"] and not changed:
            change_on_the_host(path, present)
            changed = time.perf_counter()
        if name == "stdout" and "seen" in data["text"]:
            seen = time.perf_counter()
        if name == "result" and data["status"] != "ok":
            raise RuntimeError(f"the waiting cell failed: {data}")
    if not seen:
        raise RuntimeError("the waiting cell ended without seeing the change")
    return seen - changed


async def listdir(manager: SandboxManager, sandbox_id: str) -> float:
    ran = await run_code(manager, OWNER, sandbox_id, LISTDIR)
    if ran.status != "ok":
        raise RuntimeError(f"listdir failed: {ran.error}")
    return float(ran.stdout.strip())


def resident_mib(directory: SandboxDirectory) -> float:
    pid = ProcessLock(directory.root / REFRESH_LOCK).note_of_holder()
    with open(f"/proc/{pid}/status") as f:
        rss = next(line for line in f if line.startswith("VmRSS:"))
    return int(rss.split()[1]) / 1024


async def measure(runtime: str, runs: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {name: [] for name in NAMES}
    folder = notebook_folder()
    config = Config()
    config.SandboxSettings.workspace_mode = "copy-on-write"
    manager = SandboxManager.from_config(config)
    try:
        sandbox = await manager.create(
            OWNER, runtime=runtime, purpose=PURPOSE, launch_dir=str(folder)
        )
        sandbox_id = sandbox.sandbox_id
        try:
            directory = SandboxDirectory(manager.settings.state_path, sandbox_id)
            print(f"{runtime}: refresher resident memory {resident_mib(directory):.1f} MiB")
            await listdir(manager, sandbox_id)  # the kernel's first listing warms up
            for run in range(runs):
                added = folder / f"added-{run}.csv"
                samples["host add to listed"].append(
                    await until_listed(manager, sandbox_id, added, present=True)
                )
                samples["host remove to unlisted"].append(
                    await until_listed(manager, sandbox_id, added, present=False)
                )
                samples["listdir"].append(await listdir(manager, sandbox_id))
                change_on_the_host(folder / f"again-{run}.csv", present=True)
                await asyncio.sleep(SETTLED_SECONDS)
                samples["first listdir after a change"].append(await listdir(manager, sandbox_id))
        finally:
            await manager.remove(OWNER, sandbox_id)
    finally:
        await manager.close()
        shutil.rmtree(folder, ignore_errors=True)
    return samples


def main() -> None:
    per_runtime(
        __doc__,
        title=f"a copy-on-write /workspace of {FILES} files, {{runs}} runs of each",
        column="measure",
        names=NAMES,
        runs_help="runs of each",
        measure=measure,
        streamed=("", 1),
    )


if __name__ == "__main__":
    main()
