"""Find and end gVisor processes that a failed or hung start left behind.

A runsc start that fails or hangs can leave ``runsc-sandbox`` / ``runsc-gofer`` processes and a
``Created`` container, and ``docker rm -f`` then hangs until those processes are gone. They are
recognised by their command line, which names the container's bundle directory (and so its full
64-hex container id). Only root can signal them; elsewhere these helpers do nothing.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
from pathlib import Path

log = logging.getLogger(__name__)

_CONTAINER_ID = re.compile(r"/([0-9a-f]{64})(?:/|\b)")
_RUNSC_NAMES = ("runsc", "runsc-sandbox", "runsc-gofer")


def process_age(pid: int, proc: Path = Path("/proc")) -> float:
    """Seconds since ``pid`` started (inf when it is gone)."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
        uptime = float((proc / "uptime").read_text().split()[0])
    except (OSError, ValueError):
        return float("inf")
    # Field 22 (starttime, in clock ticks since boot) counts from after the ")" of the name.
    start_ticks = int(stat.rsplit(")", 1)[1].split()[19])
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


def runsc_processes(proc: Path = Path("/proc")) -> dict[int, str]:
    """pid -> container id of every runsc process whose command line names a container."""
    found: dict[int, str] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if not argv or os.path.basename(argv[0].decode(errors="replace")) not in _RUNSC_NAMES:
            continue
        match = _CONTAINER_ID.search(b" ".join(argv).decode(errors="replace"))
        if match:
            found[int(entry.name)] = match.group(1)
    return found


async def kill_runsc_processes(
    container_ids: set[str] | None = None,
    *,
    keep: frozenset[str] = frozenset(),
    min_age: float = 0.0,
) -> list[int]:
    """SIGKILL runsc processes of ``container_ids`` (all containers when None) not in ``keep``.

    ``min_age`` (seconds) spares younger processes: a container created after the caller
    listed the engine's containers must not be mistaken for a stray one. Returns the pids
    signalled. Not being root, or a process already gone, is not an error.

    The scan reads every process's command line, as many as the host runs: on a thread, so
    the event loop that serves every owner goes on meanwhile.
    """
    if os.geteuid() != 0:
        return []
    return await asyncio.to_thread(_kill_runsc_processes, container_ids, keep, min_age)


def _kill_runsc_processes(
    container_ids: set[str] | None, keep: frozenset[str], min_age: float
) -> list[int]:
    killed = []
    for pid, container_id in runsc_processes().items():
        if container_id in keep:
            continue
        if container_ids is not None and container_id not in container_ids:
            continue
        if process_age(pid) < min_age:
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        log.warning("killed stray gVisor process %s of container %s", pid, container_id[:12])
        killed.append(pid)
    return killed


def thaw_cgroup(container_id: str, cgroups: Path = Path("/sys/fs/cgroup")) -> bool:
    """Thaw the container's cgroup by hand, behind the engine's back; whether one was found.

    For a container wedged by a pause that landed while an exec started (exec_gate.py guards
    against that in one process, not between processes): the exec's ``runc init`` waits in the
    frozen cgroup and the engine, waiting with it, answers no unpause or removal. Thawed, the
    exec starts and the engine answers again. Both cgroup versions and both of Docker's cgroup
    drivers are looked for. Not being root, or no such cgroup, is not an error.
    """
    scope = f"docker-{container_id}.scope"
    places = (
        (cgroups / "freezer" / "docker" / container_id / "freezer.state", "THAWED"),
        (cgroups / "freezer" / "system.slice" / scope / "freezer.state", "THAWED"),
        (cgroups / "docker" / container_id / "cgroup.freeze", "0"),
        (cgroups / "system.slice" / scope / "cgroup.freeze", "0"),
    )
    thawed = False
    for path, value in places:
        try:
            path.write_text(value)
        except OSError:  # not this layout, or not root
            continue
        log.warning("thawed the cgroup of container %s by hand", container_id[:12])
        thawed = True
    return thawed
