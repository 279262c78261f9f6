"""Removing a sandbox's container for good, even when its runtime hangs.

``docker rm -f`` is the whole story for a healthy container. A runsc sandbox whose start hung
(seen with ``--platform=kvm``) blocks that removal until its runtime processes are gone, so after
one time limit the runsc processes of that container are killed (runtime_processes.py) and the
removal asked for again. So is a container wedged by a pause among starting execs
(exec_gate.py): its cgroup is thawed by hand, and the engine answers again. The engine may still be running the first request, which it answers
with "already in progress": then wait for it, up to another time limit. A container that is
already gone (404) counts as removed, so removal can be repeated safely.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import docker.errors

from jupyter_sandbox.protocol.errors import EngineTimeoutError, SandboxError
from jupyter_sandbox.sandbox import labels
from jupyter_sandbox.sandbox.backends.docker.engine import DockerEngine
from jupyter_sandbox.sandbox.backends.docker.runtime_processes import (
    kill_runsc_processes,
    thaw_cgroup,
)

log = logging.getLogger(__name__)

# What the engine answers to a removal it cannot do yet but will: an earlier removal still runs
# (409), or the container's first process has exited and its shim has not reaped it yet (500,
# "PID … is zombie and can not be killed", seen for a container ending as it was removed).
REMOVAL_IN_PROGRESS = "already in progress"
NOT_REAPED_YET = "is zombie"
RETRY_SECONDS = 0.5  # between the repeated removals while the first one still runs


async def remove_container(engine: DockerEngine, sandbox_id: str) -> None:
    """Remove the sandbox's container and its anonymous volumes; a missing one is no error."""
    name = labels.container_name(sandbox_id)

    def remove() -> None:
        engine.client.api.remove_container(name, force=True, v=True)

    await _thaw(engine, sandbox_id, name)
    try:
        await engine.run(f"remove sandbox {sandbox_id}", remove, timeout=engine.timeout / 3)
        return
    except docker.errors.NotFound:
        return
    except (EngineTimeoutError, SandboxError) as exc:
        log.warning(
            "removing sandbox %s failed (%s); ending its runtime processes", sandbox_id, exc
        )
    await _end_runtime(engine, name)
    deadline = time.monotonic() + engine.timeout
    while True:
        try:
            await engine.run(f"remove sandbox {sandbox_id}", remove)
            return
        except docker.errors.NotFound:
            return
        except SandboxError as exc:
            if not any(w in str(exc) for w in (REMOVAL_IN_PROGRESS, NOT_REAPED_YET)):
                raise
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(RETRY_SECONDS)


async def _thaw(engine: DockerEngine, sandbox_id: str, name: str) -> None:
    """Unpause a paused container before its removal. runsc does not end a frozen sandbox on
    ``docker rm -f``: the removal waited out its time limit (10 s) and the runtime's processes
    were then killed, while the request that asked for it hung; thawed, it goes at once
    (0.3 s, as under runc). Its state is read from the engine's list, which, unlike inspect,
    answers for a wedged container too. Best effort: whatever fails here, the removal still
    follows."""
    try:
        row = await _list_row(engine, name)
        if row is not None and row.get("State") == "paused":
            await engine.run(
                f"unpause sandbox {sandbox_id}",
                lambda: engine.client.api.unpause(name),
                timeout=engine.timeout / 3,
            )
    except (docker.errors.NotFound, SandboxError) as exc:
        log.debug("sandbox %s not thawed before its removal: %s", sandbox_id, exc)


async def _end_runtime(engine: DockerEngine, name: str) -> None:
    """Kill the container's runsc processes and thaw its cgroup, where its removal hung."""
    row = await _list_row(engine, name)
    if row is not None:
        kill_runsc_processes({row["Id"]})
        thaw_cgroup(row["Id"])


async def _list_row(engine: DockerEngine, name: str) -> dict[str, Any] | None:
    """The engine's list entry of the container named ``name`` (full id, state), or None."""
    rows = await engine.run(
        f"find {name}",
        lambda: engine.client.api.containers(all=True, filters={"name": f"^/{name}$"}),
    )
    for row in rows:
        if f"/{name}" in (row.get("Names") or []):
            return dict(row)
    return None
