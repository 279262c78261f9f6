"""Warm pool: what a claim costs, and what an idle pool member holds on the host.

For each runtime, a pool of ``--members`` sandboxes is filled (WarmPool.refill), left idle for
``--settle`` seconds, and then:

- memory per idle member, two ways: the container's memory cgroup (``memory.usage_in_bytes``
  minus page cache, as ``docker stats`` counts it; cgroup v1 or v2), and the host processes
  belonging to the container -- everything in its cgroup plus every process whose command line
  names its container id (containerd shim; under runsc also runsc-sandbox, runsc-gofer and the
  runsc waiters) -- summed as RSS and as PSS (shared pages split among their users, so PSS sums
  stay honest across members);
- claim time: ``SandboxManager.create`` while the pool holds a fitting member, i.e. the
  host-side claim, the state update and the kernel_info round trip (the claimed sandboxes are
  removed after timing);
- with ``--kernels N``: a whole ``sandboxed-python`` kernel started by jupyter_client
  (AsyncKernelManager.start_kernel until the client's wait_for_ready), a warm member waiting for
  it each time, interleaved with a local ``python3`` ipykernel started the same way.

Needs root to read other processes' smaps (PSS); RSS works without. From the checkout:

    .venv/bin/python benchmarks/pool_members.py --members 5 --kernels 10
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from jupyter_client.manager import AsyncKernelManager
from traitlets.config import Config

from jupyter_sandbox.sandbox.lifecycle.pool_filler import WarmPool
from jupyter_sandbox.sandbox.manager import SandboxManager

OWNER = "benchmark"
PURPOSE = "benchmark"


def cgroup_memory(container_id: str) -> int | None:
    """Bytes the container's memory cgroup holds, page cache excluded (as docker stats)."""
    for base in (
        Path(f"/sys/fs/cgroup/memory/docker/{container_id}"),
        Path(f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope"),
        Path(f"/sys/fs/cgroup/docker/{container_id}"),
    ):
        usage = base / "memory.usage_in_bytes"
        if usage.exists():
            stat = dict(line.split() for line in (base / "memory.stat").read_text().splitlines())
            return int(usage.read_text()) - int(stat.get("total_inactive_file", 0))
        current = base / "memory.current"
        if current.exists():
            stat = dict(line.split() for line in (base / "memory.stat").read_text().splitlines())
            return int(current.read_text()) - int(stat.get("inactive_file", 0))
    return None


def cgroup_pids(container_id: str) -> set[int]:
    for base in (
        Path(f"/sys/fs/cgroup/memory/docker/{container_id}"),
        Path(f"/sys/fs/cgroup/pids/docker/{container_id}"),
        Path(f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope"),
    ):
        procs = base / "cgroup.procs"
        if procs.exists():
            return {int(p) for p in procs.read_text().split()}
    return set()


def processes_naming(container_id: str) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if container_id.encode() in (entry / "cmdline").read_bytes():
                found.add(int(entry.name))
        except OSError:
            continue
    return found


def rss_pss(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of ``pid`` in bytes; PSS is 0 when smaps_rollup is unreadable."""
    rss = pss = 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                pss = int(line.split()[1]) * 1024
    except OSError:
        pass
    return rss, pss


def host_memory(container_id: str) -> tuple[int, int, int]:
    pids = cgroup_pids(container_id) | processes_naming(container_id)
    pids.discard(os.getpid())
    totals = [rss_pss(pid) for pid in pids]
    return len(pids), sum(r for r, _ in totals), sum(p for _, p in totals)


def mb(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 2**20:.0f}"


async def measure(runtime: str, members: int, settle: float, launch_dir: str) -> dict[str, Any]:
    state_dir = tempfile.mkdtemp(prefix="jsbx-bench-", dir="/tmp")
    config = Config()
    config.SandboxSettings.state_dir = state_dir
    config.SandboxSettings.runtime = runtime
    config.WarmPool.size = members
    manager = SandboxManager.from_config(config)
    warm = WarmPool(manager, OWNER, launch_dir=launch_dir, purpose=PURPOSE, config=config)
    try:
        started = time.perf_counter()
        ids = await warm.refill()
        fill = time.perf_counter() - started
        await asyncio.sleep(settle)
        cgroup, rss, pss, nprocs = [], [], [], []
        for sandbox_id in ids:
            info = await manager.get(OWNER, sandbox_id)
            cgroup.append(cgroup_memory(info.container_id))
            n, r, p = host_memory(info.container_id)
            nprocs.append(n)
            rss.append(r)
            pss.append(p)
        claims = []
        for _ in ids:
            started = time.perf_counter()
            sandbox = await manager.create(OWNER, launch_dir=launch_dir, purpose=PURPOSE)
            claims.append(time.perf_counter() - started)
            assert sandbox.sandbox_id in ids, "the create did not claim a pool member"
            await manager.remove(OWNER, sandbox.sandbox_id)
        known = [c for c in cgroup if c is not None]
        return {
            "runtime": runtime,
            "fill_s_per_member": fill / len(ids),
            "claim_median_ms": statistics.median(claims) * 1000,
            "claim_max_ms": max(claims) * 1000,
            "cgroup_mb": statistics.median(known) if known else None,
            "rss_mb": statistics.median(rss),
            "pss_mb": statistics.median(pss),
            "processes": statistics.median(nprocs),
        }
    finally:
        await warm.drain()
        for info in await manager.backend.list_sandboxes():
            if Path(info.host_dir).parent == Path(state_dir):
                await manager.backend.remove(info.sandbox_id)
        await manager.close()
        shutil.rmtree(state_dir, ignore_errors=True)


async def time_kernel(kernel_name: str, cwd: str, env: dict[str, str]) -> float:
    km = AsyncKernelManager(kernel_name=kernel_name)
    started = time.perf_counter()
    try:
        await km.start_kernel(cwd=cwd, env=env)
        kc = km.client()
        kc.start_channels()
        try:
            await kc.wait_for_ready(timeout=60)
            return time.perf_counter() - started
        finally:
            kc.stop_channels()
    finally:
        if km.has_kernel:
            await km.shutdown_kernel(now=False)


async def measure_kernels(runtime: str, runs: int, launch_dir: str) -> dict[str, float]:
    """Median seconds of a warm sandboxed-python kernel start and of a local python3 one."""
    state_dir = tempfile.mkdtemp(prefix="jsbx-bench-", dir="/tmp")
    config_dir = tempfile.mkdtemp(prefix="jsbx-bench-config-", dir="/tmp")
    with open(os.path.join(config_dir, "jupyter_sandbox_config.py"), "w") as f:  # noqa: ASYNC230
        f.write(f"c.SandboxSettings.state_dir = {state_dir!r}\n")
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": config_dir,
        "JUPYTER_SANDBOX_RUNTIME": runtime,
        "JUPYTER_SANDBOX_PURPOSE": PURPOSE,
    }
    config = Config()
    config.SandboxSettings.state_dir = state_dir
    config.SandboxSettings.runtime = runtime
    manager = SandboxManager.from_config(config)
    warm = WarmPool(manager, getpass.getuser(), launch_dir=launch_dir, purpose=PURPOSE)
    warm_times, local_times = [], []
    try:
        for _ in range(runs):
            await warm.refill()
            warm_times.append(await time_kernel("sandboxed-python", launch_dir, env))
            assert not any(warm.members().values()), "the kernel did not claim the member"
            local_times.append(await time_kernel("python3", launch_dir, dict(os.environ)))
    finally:
        await warm.drain()
        for info in await manager.backend.list_sandboxes():
            if Path(info.host_dir).parent == Path(state_dir):
                await manager.backend.remove(info.sandbox_id)
        await manager.close()
        shutil.rmtree(state_dir, ignore_errors=True)
        shutil.rmtree(config_dir, ignore_errors=True)
    return {"warm": statistics.median(warm_times), "local": statistics.median(local_times)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=5)
    parser.add_argument("--settle", type=float, default=5.0, help="idle seconds before measuring")
    parser.add_argument("--runtimes", default="runc,runsc")
    parser.add_argument("--kernels", type=int, default=0, help="whole kernel starts per runtime")
    args = parser.parse_args()
    launch_dir = tempfile.mkdtemp(prefix="jsbx-bench-nb-", dir="/tmp")
    rows = [
        await measure(runtime, args.members, args.settle, launch_dir)
        for runtime in args.runtimes.split(",")
    ]
    kernel_rows = [
        (runtime, await measure_kernels(runtime, args.kernels, launch_dir))
        for runtime in args.runtimes.split(",")
        if args.kernels
    ]
    os.rmdir(launch_dir)
    print(
        f"{'runtime':8} {'fill s/member':>13} {'claim ms (median/max)':>22} "
        f"{'cgroup MB':>9} {'host RSS MB':>11} {'host PSS MB':>11} {'procs':>5}"
    )
    for row in rows:
        claim = f"{row['claim_median_ms']:.0f} / {row['claim_max_ms']:.0f}"
        print(
            f"{row['runtime']:8} {row['fill_s_per_member']:13.2f} {claim:>22} "
            f"{mb(row['cgroup_mb']):>9} {mb(row['rss_mb']):>11} {mb(row['pss_mb']):>11} "
            f"{row['processes']:5.0f}"
        )

    if kernel_rows:
        print(f"\nkernel start -> ready (jupyter_client), median of {args.kernels} runs")
        print(f"{'runtime':8} {'warm ms':>8} {'local python3 ms':>16} {'warm / local':>12}")
        for runtime, times in kernel_rows:
            print(
                f"{runtime:8} {times['warm'] * 1000:8.0f} {times['local'] * 1000:16.0f} "
                f"{times['warm'] / times['local']:12.2f}"
            )


if __name__ == "__main__":
    asyncio.run(main())
