"""The Docker engine's JSON answers as the backend's records: SandboxInfo, EngineStats, EngineFacts.

Kept apart from the calls that fetch them, so the engine's field names and layouts (inspect vs
list rows, cgroup v1 vs v2 stats) are read here and nowhere else.
"""

from __future__ import annotations

from typing import Any

from jupyter_sandbox.protocol.statuses import sandbox_status
from jupyter_sandbox.sandbox import labels
from jupyter_sandbox.sandbox.backends.records import EngineFacts, EngineStats, SandboxInfo


def facts_from_info(info: dict[str, Any]) -> EngineFacts:
    """docker's ``info`` JSON as EngineFacts."""
    return EngineFacts(
        version=str(info.get("ServerVersion", "?")),
        runtimes=frozenset(info.get("Runtimes") or {}),
        cgroup_version=str(info.get("CgroupVersion", "?")),
        swap_limit=bool(info.get("SwapLimit", True)),
        kernel_version=str(info.get("KernelVersion", "")),
        experimental=bool(info.get("ExperimentalBuild", False)),
        root_dir=str(info.get("DockerRootDir", "")),
    )


def info_from_inspect(raw: dict[str, Any]) -> SandboxInfo:
    """A container as ``docker inspect`` describes it."""
    found = raw["Config"].get("Labels") or {}
    state = raw.get("State") or {}
    return _info(
        raw["Id"],
        raw["Name"].lstrip("/"),
        found,
        raw["Config"].get("Image", ""),
        state.get("Status", "unknown"),
        raw.get("Created", ""),
        exit_code=state.get("ExitCode"),
        oom_killed=bool(state.get("OOMKilled")),
        image_id=str(raw.get("Image", "")),
    )


def info_from_list_row(row: dict[str, Any]) -> SandboxInfo:
    """A container as one row of ``docker ps`` describes it (no exit code or OOM flag there)."""
    return _info(
        row["Id"],
        row["Names"][0].lstrip("/"),
        row.get("Labels") or {},
        row.get("Image", ""),
        row.get("State", "unknown"),
        str(row.get("Created", "")),
        image_id=str(row.get("ImageID", "")),
    )


def _info(
    container_id: str,
    name: str,
    found: dict[str, str],
    image: str,
    status: str,
    created: str,
    *,
    exit_code: int | None = None,
    oom_killed: bool = False,
    image_id: str = "",
) -> SandboxInfo:
    return SandboxInfo(
        sandbox_id=found.get(labels.SANDBOX_ID, ""),
        container_id=container_id,
        name=name,
        owner=found.get(labels.OWNER, ""),
        runtime=found.get(labels.RUNTIME, ""),
        image=image,
        status=sandbox_status(status),
        labels=dict(found),
        host_dir=found.get(labels.HOST_DIR, ""),
        created=found.get(labels.CREATED, created),
        exit_code=exit_code,
        oom_killed=oom_killed,
        image_id=image_id,
    )


def stats_from_json(raw: dict[str, Any]) -> EngineStats:
    """docker's stats JSON (cgroup v1 or v2 layout) as EngineStats."""
    cpu = raw.get("cpu_stats") or {}
    memory = raw.get("memory_stats") or {}
    detail = memory.get("stats") or {}
    pids = raw.get("pids_stats") or {}
    inactive = detail.get("total_inactive_file", detail.get("inactive_file"))
    return EngineStats(
        cpu_ns=(cpu.get("cpu_usage") or {}).get("total_usage"),
        system_cpu_ns=cpu.get("system_cpu_usage"),
        online_cpus=cpu.get("online_cpus"),
        memory_usage=memory.get("usage"),
        memory_inactive_file=inactive,
        memory_limit=memory.get("limit"),
        memory_swap_limit=detail.get("hierarchical_memsw_limit"),
        pids=pids.get("current"),
        pids_limit=pids.get("limit"),
    )
