"""Live resource use of one sandbox: CPU, memory, pids, workspace bytes.

Two sources, each named in the result:

* the engine's one-shot stats, read from the sandbox's host cgroup (the CPU percentage comes from
  two samples: see :func:`measure_stats`). Under runsc that cgroup holds gVisor's sentry and gofer,
  so its memory is the sandbox's whole footprint on the host (what the memory limit is enforced on)
  and its pids count gVisor's own threads, not the sandbox's processes;
* a short stdlib script inside the sandbox (statvfs of /workspace when it is a tmpfs, otherwise a
  walk with a time limit; the processes it can see; /proc/meminfo, which gVisor fills from its
  own accounting).
"""

from __future__ import annotations

import asyncio
import logging
import reprlib
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from jupyter_sandbox.protocol import strict_json
from jupyter_sandbox.protocol.errors import SandboxError
from jupyter_sandbox.sandbox.backends.base import ExecOptions, SandboxBackend
from jupyter_sandbox.sandbox.backends.records import EngineStats
from jupyter_sandbox.sandbox.host.clock import now_iso
from jupyter_sandbox.sandbox.programs import image_programs

log = logging.getLogger(__name__)

# Seconds the in-sandbox measurement may take; a workspace walk stops after WALK_SECONDS.
INSIDE_TIMEOUT = 5.0
WALK_SECONDS = 2.0
ENGINE = "engine stats (host cgroup)"
# Bytes the in-sandbox measurement may print: it prints about 200.
MAX_INSIDE_BYTES = 64 * 1024
# The keys it prints always, and those it prints when /workspace is a directory.
_INSIDE_KEYS = frozenset({"workspace_fstype", "processes", "meminfo"})
_WORKSPACE_KEYS = frozenset({"workspace_bytes", "workspace_complete"})

INSIDE_SCRIPT = f"""
import json, os, time
out = {{}}
fstype = None
for line in open("/proc/self/mountinfo"):
    parts = line.split()
    if parts[4] == "/workspace":
        fstype = parts[parts.index("-") + 1]
out["workspace_fstype"] = fstype
if os.path.isdir("/workspace"):
    if fstype == "tmpfs":
        st = os.statvfs("/workspace")
        out["workspace_bytes"] = (st.f_blocks - st.f_bfree) * st.f_frsize
        out["workspace_complete"] = True
    else:
        total, seen, complete = 0, set(), True
        deadline = time.monotonic() + {WALK_SECONDS}
        stack = ["/workspace"]
        while stack:
            if time.monotonic() > deadline:
                complete = False
                break
            try:
                entries = list(os.scandir(stack.pop()))
            except OSError:
                continue
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
        out["workspace_bytes"] = total
        out["workspace_complete"] = complete
own = {{os.getpid(), os.getppid()}}
out["processes"] = sum(1 for p in os.listdir("/proc") if p.isdigit() and int(p) not in own)
info = {{}}
for line in open("/proc/meminfo"):
    name, _, rest = line.partition(":")
    if name in ("MemTotal", "MemAvailable"):
        info[name] = int(rest.split()[0]) * 1024
out["meminfo"] = info
print(json.dumps(out))
"""


@dataclass(frozen=True)
class SandboxStats:
    """One measurement of a sandbox's resource use. ``None``: not measured (see ``notes``)."""

    sandbox_id: str
    runtime: str
    measured_at: str
    duration_seconds: float
    cpu_seconds: float | None  # CPU time of the host cgroup since start (runsc: gVisor's too)
    cpu_percent: float | None  # since the previous sample; 100 = one core busy
    memory_bytes: int | None  # host cgroup use minus reclaimable page cache (as `docker stats`)
    memory_limit_bytes: int | None
    pids: int | None  # runc: tasks in the pids cgroup; runsc: processes seen inside the sandbox
    pids_limit: int | None  # the host pids cgroup's limit (runsc: bounds gVisor's threads)
    processes: int | None  # processes visible inside the sandbox (this measurement excluded)
    workspace_bytes: int | None
    workspace_complete: bool  # False: the walk of a large /workspace was cut off
    sources: dict[str, str] = field(default_factory=dict)
    inside_memory: dict[str, int] = field(default_factory=dict)  # /proc/meminfo inside
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


async def measure_inside(backend: SandboxBackend, sandbox_id: str) -> dict[str, Any]:
    """The in-sandbox measurement, or ``{"error": ...}``."""
    try:
        result = await backend.exec(
            sandbox_id,
            image_programs.python_reading_stdin(),
            ExecOptions(
                timeout=INSIDE_TIMEOUT,
                stdin=INSIDE_SCRIPT.encode(),
                max_output=MAX_INSIDE_BYTES,
                supervised=False,
            ),
        )
    except SandboxError as exc:  # OutputTooLargeError too
        return {"error": exc.message}
    if result.exit_code != 0:
        return {
            "error": f"exit {result.exit_code}: {result.stderr.decode(errors='replace')[-200:]}"
        }
    return inside_report(result.stdout)


def inside_report(stdout: bytes) -> dict[str, Any]:
    """What INSIDE_SCRIPT printed, checked key by key and type by type, or ``{"error": why}``
    (the sandbox's code can print anything in its place, an ``error`` of its own too)."""
    try:
        data = strict_json.loads(stdout, max_bytes=MAX_INSIDE_BYTES)
    except strict_json.MalformedJSONError as exc:
        return {"error": f"output is unreadable: {exc.message}"}
    if not isinstance(data, dict):
        return {"error": "output is not an object"}
    keys = set(data)
    if not (
        keys >= _INSIDE_KEYS
        and keys <= _INSIDE_KEYS | _WORKSPACE_KEYS
        and (keys >= _WORKSPACE_KEYS or not keys & _WORKSPACE_KEYS)
    ):
        # reprlib: the keys are the sandbox's, of any length and number; a note stays short.
        return {"error": f"output has other keys than expected: {reprlib.repr(sorted(keys))}"}
    fstype, meminfo = data["workspace_fstype"], data["meminfo"]
    if not (
        (fstype is None or (isinstance(fstype, str) and len(fstype) <= 64))
        and _is_count(data["processes"])
        and isinstance(meminfo, dict)
        and set(meminfo) <= {"MemTotal", "MemAvailable"}
        and all(_is_count(value) for value in meminfo.values())
        and (
            "workspace_bytes" not in data
            or (_is_count(data["workspace_bytes"]) and type(data["workspace_complete"]) is bool)
        )
    ):
        return {"error": "output has a value of the wrong type or out of range"}
    return data


def _is_count(value: object) -> bool:
    """A whole number of bytes or processes: not a bool, a float, negative, or past 2**63."""
    return type(value) is int and 0 <= value < 2**63


def cpu_percent(first: EngineStats, second: EngineStats, wall: float) -> float | None:
    """CPU use between two samples, as `docker stats` computes it (100 = one core)."""
    if first.cpu_ns is None or second.cpu_ns is None:
        return None
    used = second.cpu_ns - first.cpu_ns
    elapsed = wall * 1e9
    if first.system_cpu_ns and second.system_cpu_ns and second.online_cpus:
        host = (second.system_cpu_ns - first.system_cpu_ns) / second.online_cpus
        if host > 0:
            elapsed = host
    return round(100.0 * used / elapsed, 1) if elapsed > 0 else None


# The last engine sample of each sandbox (monotonic time, sample), so that a caller that polls
# gets the CPU percentage since its previous call at no extra cost.
_last_samples: dict[str, tuple[float, EngineStats]] = {}
MAX_SAMPLES = 1024
SAMPLE_MAX_AGE = 300.0


async def measure_stats(
    backend: SandboxBackend, sandbox_id: str, *, wait_for_cpu_percent: bool = False
) -> SandboxStats:
    """Measure ``sandbox_id`` now. Engine errors (e.g. no such sandbox) propagate.

    The engine answers a one-shot stats call at its next collection tick (Docker collects once
    a second; the first call is often answered at once), so one sample costs up to a second. The
    CPU percentage is taken over the time since this process last measured the sandbox (within
    SAMPLE_MAX_AGE); without such a sample it is None, unless ``wait_for_cpu_percent`` asks for a
    second sample (one more engine tick).
    """
    start = time.monotonic()
    info = await backend.inspect(sandbox_id)
    inside_task = asyncio.ensure_future(measure_inside(backend, sandbox_id))
    try:
        sample = await backend.stats(sandbox_id)
        now = time.monotonic()
        previous = _last_samples.get(sandbox_id)
        if previous is not None and now - previous[0] > SAMPLE_MAX_AGE:
            previous = None
        if previous is None and wait_for_cpu_percent:
            previous = (now, sample)
            sample = await backend.stats(sandbox_id)
            now = time.monotonic()
        inside = await inside_task
    finally:
        inside_task.cancel()
    _remember(sandbox_id, now, sample)
    notes: list[str] = []
    sources = {"cpu": ENGINE, "memory": ENGINE + ": usage minus inactive page cache"}
    percent = None
    if previous is not None:
        percent = cpu_percent(previous[1], sample, now - previous[0])
        sources["cpu_percent"] = f"{ENGINE}: over the last {now - previous[0]:.1f}s"
    else:
        notes.append("cpu_percent needs an earlier sample: measure again, or wait_for_cpu_percent")
    if "error" in inside:
        notes.append(f"in-sandbox measurement failed: {inside['error']}")
    memory = None
    if sample.memory_usage is not None:
        memory = sample.memory_usage - (sample.memory_inactive_file or 0)
    processes = inside.get("processes")
    pids = sample.pids
    sources["pids"] = ENGINE + ": tasks in the pids cgroup"
    if info.runtime == "runsc":
        pids = processes
        sources["pids"] = "processes visible inside the sandbox"
        notes.append(
            "runsc: the host cgroup holds gVisor's sentry and gofer; memory and CPU include "
            f"them, and its {sample.pids} tasks are gVisor's threads, not the sandbox's processes"
        )
    workspace = inside.get("workspace_bytes")
    if workspace is not None:
        how = "statvfs of the tmpfs" if inside.get("workspace_fstype") == "tmpfs" else "file walk"
        sources["workspace"] = f"inside the sandbox: {how} of /workspace"
    return SandboxStats(
        sandbox_id=sandbox_id,
        runtime=info.runtime,
        measured_at=now_iso(),
        duration_seconds=round(time.monotonic() - start, 3),
        cpu_seconds=None if sample.cpu_ns is None else round(sample.cpu_ns / 1e9, 3),
        cpu_percent=percent,
        memory_bytes=memory,
        memory_limit_bytes=sample.memory_limit,
        pids=pids,
        pids_limit=sample.pids_limit,
        processes=processes,
        workspace_bytes=workspace,
        workspace_complete=bool(inside.get("workspace_complete", False)),
        sources=sources,
        inside_memory=dict(inside.get("meminfo") or {}),
        notes=notes,
    )


def _remember(sandbox_id: str, when: float, sample: EngineStats) -> None:
    _last_samples.pop(sandbox_id, None)
    _last_samples[sandbox_id] = (when, sample)
    while len(_last_samples) > MAX_SAMPLES:
        _last_samples.pop(next(iter(_last_samples)))
