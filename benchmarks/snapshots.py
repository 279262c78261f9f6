"""Workspace snapshot throughput: persist and hydrate vs plain ``tar`` on the host.

For each runtime, transport (``Snapshots.transport``: ``exec``, the engine's exec stream, or
``host-dir``, the sandbox's own host directory) and workspace size, a real sandbox gets a /workspace of random bytes (one big
file and a hundred small ones, made inside it with ``head -c /dev/urandom``), then, ``--runs``
times each (median reported):

- ``persist``: ``Snapshots.persist`` -- the archive made out of the sandbox's reach
  (``--archiver sealed``, the default: a privileged, capability-dropped tar under runsc, the
  host's walk of the frozen sandbox under runc; sandbox/backends/docker/sealed_archive.py) or
  by tar in the sandbox as its user (``--archiver in-sandbox``: what a runc server that is not
  root does, and what every server did before row 43), streamed to the host, scanned (every
  member checked, sha256), stored atomically with fsync; the transport matters to persist
  only in-sandbox;
- ``hydrate``: ``Snapshots.hydrate`` into a fresh sandbox -- the archive scanned and its sha256
  checked, the target checked for planted symlinks, a clean archive written and unpacked by
  tar in the sandbox (sandbox creation not timed);
- ``tar -c`` / ``tar -x``: plain GNU tar of the same bytes in a directory on the host, to and
  from a file on the same disk as the snapshots (the target: persist and hydrate <= 1.5x).

The workspace sandboxes are made without the kernel bridge, so their "memory" column says a
memory snapshot is refused. ``--memory MB`` (repeatable) times memory snapshots instead: a runsc
sandbox made for them (``SandboxSettings.memory_snapshots``) whose kernel holds MB of random
bytes is checkpointed (the sandbox stops) and restored, ``--runs`` times; reported: the
checkpoint, the restore up to the kernel answering again, and the size of the engine's image.
Needs the Docker engine (in experimental mode for ``--memory``) and the sandbox image:

    .venv/bin/python benchmarks/snapshots.py --runtime runc --runtime runsc --size 10 --size 200 \
        [--transport exec --transport host-dir] [--archiver sealed --archiver in-sandbox] \
        [--runs 3]
    .venv/bin/python benchmarks/snapshots.py --memory 10 --memory 500 --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from traitlets.config import Config

from jupyter_sandbox.protocol.snapshot_errors import MemorySnapshotUnsupportedError
from jupyter_sandbox.sandbox.manager import SandboxManager

OWNER = "benchmark"
PURPOSE = "benchmark:snapshots"
TARGET = 1.5
SMALL_FILES = 100


def fill_script(megabytes: int) -> str:
    small = " && ".join(
        f"head -c 10240 /dev/urandom > /workspace/small/{i}.bin" for i in range(SMALL_FILES)
    )
    return f"mkdir /workspace/small && {small} && head -c {megabytes}M /dev/urandom > /workspace/big.bin"


async def timed(action: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await action()
    return time.perf_counter() - start


def host_tar(megabytes: int, work: Path, runs: int) -> tuple[float, float]:
    """Median seconds of plain tar -c and tar -x of the same shape of data on the host."""
    source = work / "source"
    (source / "small").mkdir(parents=True)
    for i in range(SMALL_FILES):
        (source / "small" / f"{i}.bin").write_bytes(os.urandom(10240))
    with open(source / "big.bin", "wb") as f:
        for _ in range(megabytes):
            f.write(os.urandom(1024**2))
    create, extract = [], []
    for _ in range(runs):
        archive = work / "plain.tar"
        start = time.perf_counter()
        subprocess.run(["tar", "-c", "-f", str(archive), "-C", str(source), "."], check=True)
        create.append(time.perf_counter() - start)
        target = work / "target"
        target.mkdir()
        start = time.perf_counter()
        subprocess.run(["tar", "-x", "-f", str(archive), "-C", str(target)], check=True)
        extract.append(time.perf_counter() - start)
        shutil.rmtree(target)
        archive.unlink()
    shutil.rmtree(source)
    return statistics.median(create), statistics.median(extract)


async def measure(
    manager: SandboxManager,
    runtime: str,
    transport: str,
    archiver: str,
    megabytes: int,
    runs: int,
    work: Path,
) -> dict[str, Any]:
    limits = {
        "workspace_size": f"{megabytes + 200}m",
        "memory": f"{max(2048, 2 * megabytes + 1024)}m",
    }
    snapshots = manager.snapshots
    snapshots.transport = transport
    backend: Any = manager.backend
    if archiver == "in-sandbox":  # as the backend answers for a runc server that is not root
        backend.why_not_sealed = lambda runtime: "the benchmark's --archiver in-sandbox"
    else:
        backend.__dict__.pop("why_not_sealed", None)
    source = await manager.create(OWNER, runtime=runtime, limits=limits, purpose=PURPOSE)
    result = await manager.exec(OWNER, source.sandbox_id, ["sh", "-c", fill_script(megabytes)])
    assert result.exit_code == 0, result.stderr
    persist, hydrate = [], []
    made: dict[str, Any] = {}
    for _ in range(runs):
        persist.append(await timed(lambda: _persist(made, snapshots, source.sandbox_id)))
        target = await manager.create(OWNER, runtime=runtime, limits=limits, purpose=PURPOSE)
        hydrate.append(
            await timed(lambda: snapshots.hydrate(OWNER, made["id"], target.sandbox_id))  # noqa: B023
        )
        await manager.remove(OWNER, target.sandbox_id)
        await snapshots.delete(OWNER, made["id"])
    try:
        await snapshots.checkpoint(OWNER, source.sandbox_id)
        memory = "taken"
    except MemorySnapshotUnsupportedError as exc:
        memory = f"refused ({exc.code})"
    await manager.remove(OWNER, source.sandbox_id)
    tar_c, tar_x = await asyncio.to_thread(host_tar, megabytes, work, runs)
    size = made["size"] / 1024**2
    return {
        "runtime": runtime,
        "transport": transport,
        "archiver": archiver,
        "MiB": megabytes,
        "archive MiB": size,
        "persist s": statistics.median(persist),
        "hydrate s": statistics.median(hydrate),
        "tar -c s": tar_c,
        "tar -x s": tar_x,
        "memory": memory,
    }


async def measure_memory(manager: SandboxManager, megabytes: int, runs: int) -> dict[str, Any]:
    from jupyter_client.asynchronous.client import AsyncKernelClient

    sandbox = await manager.create(OWNER, runtime="runsc", purpose=PURPOSE)
    client = AsyncKernelClient()
    client.load_connection_info(sandbox.connection_info)
    client.start_channels()
    reply = await client.execute_interactive(f"import os; data = os.urandom({megabytes} << 20)")
    client.stop_channels()
    assert reply["content"]["status"] == "ok", reply
    checkpoint, restore, sizes = [], [], []
    for _ in range(runs):
        started = time.perf_counter()
        made = await manager.snapshots.checkpoint(OWNER, sandbox.sandbox_id)
        checkpoint.append(time.perf_counter() - started)
        sizes.append((made["size"] or 0) / 1024**2)
        started = time.perf_counter()
        await manager.snapshots.restore_memory(OWNER, made["id"])
        restore.append(time.perf_counter() - started)
        await manager.snapshots.delete(OWNER, made["id"])
    await manager.remove(OWNER, sandbox.sandbox_id)
    return {
        "kernel holds MiB": megabytes,
        "checkpoint s": statistics.median(checkpoint),
        "restore s": statistics.median(restore),
        "image MiB": statistics.median(sizes),
    }


async def _persist(made: dict[str, Any], snapshots: Any, sandbox_id: str) -> None:
    made.update(await snapshots.persist(OWNER, sandbox_id))


def print_table(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        if "kernel holds MiB" in r:
            print(
                f"memory snapshot (runsc): kernel holds {r['kernel holds MiB']} MiB: checkpoint "
                f"{r['checkpoint s']:.2f} s, restore {r['restore s']:.2f} s, image "
                f"{r['image MiB']:.0f} MiB"
            )
    rows = [r for r in rows if "kernel holds MiB" not in r]
    if not rows:
        return
    print(
        f"{'runtime':7} {'transport':9} {'archiver':10} {'MiB':>5} {'persist s':>9} {'MB/s':>6} "
        f"{'hydrate s':>9} {'MB/s':>6} {'tar -c s':>8} {'tar -x s':>8} "
        f"{'persist/tar':>11} {'hydrate/tar':>11}  memory snapshot"
    )
    for r in rows:
        mb = r["archive MiB"] * 1.048576
        print(
            f"{r['runtime']:7} {r['transport']:9} {r['archiver']:10} {r['MiB']:>5} {r['persist s']:>9.2f} "
            f"{mb / r['persist s']:>6.0f} {r['hydrate s']:>9.2f} {mb / r['hydrate s']:>6.0f} "
            f"{r['tar -c s']:>8.2f} {r['tar -x s']:>8.2f} "
            f"{r['persist s'] / r['tar -c s']:>10.1f}x {r['hydrate s'] / r['tar -x s']:>10.1f}x"
            f"  {r['memory']}"
        )
    print(f"target: persist and hydrate <= {TARGET}x plain tar on the host")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runtime", action="append", choices=["runc", "runsc"])
    parser.add_argument("--transport", action="append", choices=["exec", "host-dir"])
    parser.add_argument("--archiver", action="append", choices=["sealed", "in-sandbox"])
    parser.add_argument("--size", action="append", type=int, help="workspace MiB (repeatable)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--memory", action="append", type=int, help="kernel MiB (repeatable)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="jsbx-bench-", dir="/tmp"))
    config = Config()
    config.SandboxSettings.state_dir = str(work / "state")
    config.Snapshots.snapshot_dir = str(work / "snapshots")
    config.WarmPool.size = 0
    config.SandboxSettings.memory_snapshots = bool(args.memory)
    manager = SandboxManager.from_config(config)
    rows = []
    try:
        for megabytes in args.memory or []:
            rows.append(await measure_memory(manager, megabytes, args.runs))
        for runtime in [] if args.memory else args.runtime or ["runc", "runsc"]:
            for transport in args.transport or ["exec", "host-dir"]:
                for archiver in args.archiver or ["sealed"]:
                    for megabytes in args.size or [10, 200]:
                        rows.append(
                            await measure(
                                manager, runtime, transport, archiver, megabytes, args.runs, work
                            )
                        )
    finally:
        for info in await manager.backend.list_sandboxes(OWNER):
            if manager.holds(info):
                await manager.backend.remove(info.sandbox_id)
        await manager.close()
        shutil.rmtree(work, ignore_errors=True)
    print_table(rows)


if __name__ == "__main__":
    asyncio.run(main())
