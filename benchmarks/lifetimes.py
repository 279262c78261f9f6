"""How fast an unnamed kernel's sandbox goes once what started it is gone, with no server.

For each runtime, ``--runs`` times each of (a real jupyter_client KernelManager, real signals):

- ``shutdown now``: ``shutdown_kernel(now=True)`` (the kernel process killed with SIGKILL) until
  its container is gone: the lifeline's removal (sandbox/lifecycle/lifeline.py; jupyter_client removes
  the connection file right after the kill, so the lifeline does not wait for a successor);
- ``client killed: kernel``: a client process that started a kernel killed with SIGKILL, until
  the kernel process has exited (kernel/parent_watch.py: the kernel removes its sandbox first);
- ``client killed: sandbox``: the same, until the container is gone.

Then, once: the resident memory of a waiting lifeline (what each running unnamed kernel adds on
the host), and the time of a sweep (reaper.sweep_orphans: what the start of a kernel or of a
``jupyter sandbox`` verb runs beside its own work) over a state directory with N sandboxes and no
orphans. Prints the median and p90 of each in seconds. Needs the Docker engine and the image:

    .venv/bin/python benchmarks/lifetimes.py --runtime runc --runtime runsc --runs 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import docker
from jupyter_client.manager import KernelManager

# Run as a script from benchmarks/, whose directory is on sys.path.
from timing import p90
from traitlets.config import Config

from jupyter_sandbox.sandbox import labels
from jupyter_sandbox.sandbox.lifecycle.lifeline import Lifeline
from jupyter_sandbox.sandbox.lifecycle.reaper import sweep_orphans
from jupyter_sandbox.sandbox.manager import SandboxManager

PURPOSE = "benchmark:lifetimes"
CLIENT = """
import json, os, sys
from jupyter_client.manager import KernelManager
km = KernelManager(kernel_name="sandboxed-python")
km.start_kernel(cwd=sys.argv[1], env=dict(os.environ))
kc = km.client()
kc.start_channels()
kc.wait_for_ready(timeout=120)
print(json.dumps({"kernel_pid": km.provisioner.pid}), flush=True)
sys.stdin.read()
"""


@contextmanager
def environment(runtime: str) -> Iterator[Path]:
    """A private state directory (through a private config directory) for ``runtime``."""
    state_dir = Path(tempfile.mkdtemp(prefix="jsbx-", dir="/tmp"))
    config_dir = Path(tempfile.mkdtemp(prefix="jsbx-config-", dir="/tmp"))
    (config_dir / "jupyter_sandbox_config.py").write_text(
        f"c.SandboxSettings.state_dir = {str(state_dir)!r}\n"
        f"c.SandboxSettings.runtime = {runtime!r}\n"
    )
    saved = dict(os.environ)
    os.environ.update(JUPYTER_CONFIG_DIR=str(config_dir), JUPYTER_SANDBOX_PURPOSE=PURPOSE)
    try:
        yield state_dir
    finally:
        os.environ.clear()
        os.environ.update(saved)
        asyncio.run(remove_all(state_dir))
        shutil.rmtree(state_dir, ignore_errors=True)
        shutil.rmtree(config_dir, ignore_errors=True)


def manager_of(state_dir: Path) -> SandboxManager:
    return SandboxManager.from_config(Config({"SandboxSettings": {"state_dir": str(state_dir)}}))


async def remove_all(state_dir: Path) -> None:
    """Every sandbox of ``state_dir``, with its directory (and its caps' mounts)."""
    manager = manager_of(state_dir)
    try:
        for info in await manager.backend.list_sandboxes():
            if manager.holds(info):
                await manager.remove(info.owner, info.sandbox_id)
    finally:
        await manager.close()


def containers(state_dir: Path) -> list[str]:
    """Ids of the containers of ``state_dir``'s sandboxes, from one listing (an inspect of each
    would race with their removal, which is what is being timed)."""
    client = docker.from_env(version="auto")
    rows = client.api.containers(all=True, filters={"label": labels.HOST_DIR})
    return [
        str(row["Id"]) for row in rows if Path(row["Labels"][labels.HOST_DIR]).parent == state_dir
    ]


def seconds_until(condition: Callable[[], bool], limit: float = 60.0) -> float:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > limit:
            raise RuntimeError(f"not within {limit}s")
        time.sleep(0.05)
    return time.monotonic() - started


def ended(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except FileNotFoundError:
        return True


def shutdown_now(state_dir: Path) -> float:
    km = KernelManager(kernel_name="sandboxed-python")
    km.start_kernel(cwd=str(state_dir.parent), env=dict(os.environ))
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=120)
    kc.stop_channels()
    km.shutdown_kernel(now=True)
    took = seconds_until(lambda: not containers(state_dir))
    km.cleanup_resources()
    return took


def client_killed(state_dir: Path) -> tuple[float, float]:
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT, str(state_dir.parent)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert client.stdout is not None
    assert client.stdin is not None
    kernel_pid = int(json.loads(client.stdout.readline())["kernel_pid"])
    client.kill()
    started = time.monotonic()
    client.wait()
    client.stdin.close()
    client.stdout.close()
    seconds_until(lambda: ended(kernel_pid))
    kernel = time.monotonic() - started
    seconds_until(lambda: not containers(state_dir))
    return kernel, time.monotonic() - started


def lifeline_rss_kib(state_dir: Path) -> int:
    connection_file = state_dir / "kernel-benchmark.json"
    connection_file.write_text("{}")
    lifeline = Lifeline.start(state_dir, "benchmark", "kernel-0123456789abcdef", connection_file)
    time.sleep(1.0)  # imported and waiting
    with open(f"/proc/{lifeline.process.pid}/status") as status:
        rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    lifeline.release()
    lifeline.process.wait()
    return rss


async def sweep_seconds(state_dir: Path, runtime: str, sandboxes: int, runs: int) -> list[float]:
    manager = manager_of(state_dir)
    try:
        for _ in range(sandboxes):
            await manager.create("benchmark", runtime=runtime, purpose=PURPOSE)
        samples = []
        for _ in range(runs):
            started = time.perf_counter()
            report = await sweep_orphans(manager)
            samples.append(time.perf_counter() - started)
            assert not report.containers
        return samples
    finally:
        await manager.close()


def show(runtime: str, name: str, values: list[float]) -> None:
    print(f"{runtime:<6} {name:<24} {statistics.median(values):>8.2f} {p90(values):>8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runtime", action="append", choices=["runc", "runsc"])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--sandboxes", type=int, default=5, help="sandboxes the sweep looks at")
    args = parser.parse_args()
    print(f"{'':6} {'seconds, ' + str(args.runs) + ' runs':<24} {'median':>8} {'p90':>8}")
    for runtime in args.runtime or ["runc", "runsc"]:
        with environment(runtime) as state_dir:
            now = [shutdown_now(state_dir) for _ in range(args.runs)]
            killed = [client_killed(state_dir) for _ in range(args.runs)]
            show(runtime, "shutdown now", now)
            show(runtime, "client killed: kernel", [kernel for kernel, _ in killed])
            show(runtime, "client killed: sandbox", [sandbox for _, sandbox in killed])
            sweeps = asyncio.run(sweep_seconds(state_dir, runtime, args.sandboxes, args.runs))
            show(runtime, f"sweep, {args.sandboxes} sandboxes", sweeps)
    with environment("runc") as state_dir:
        print(f"a waiting lifeline's resident memory: {lifeline_rss_kib(state_dir)} KiB")


if __name__ == "__main__":
    main()
