"""Removing a sandbox's container for good, even when its runtime hangs.

``docker rm -f`` is the whole story for a healthy container. A runsc sandbox whose start hung
(seen with ``--platform=kvm``) blocks that removal until its runtime processes are gone, so after
one time limit the runsc processes of that container are killed (runtime_processes.py) and the
removal asked for again. The engine may still be running the first request, which it answers
with "already in progress": then wait for it, up to another time limit. A container that is
already gone (404) counts as removed, so removal can be repeated safely.
"""

from __future__ import annotations

import asyncio
import logging
import time

import docker.errors

from . import labels
from .engine import DockerEngine
from .errors import EngineTimeoutError, SandboxError
from .runtime_processes import kill_runsc_processes

log = logging.getLogger(__name__)

# What the engine answers (409) to a removal asked for while an earlier one still runs.
REMOVAL_IN_PROGRESS = "already in progress"
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
    await _kill_runtime_processes(engine, name)
    deadline = time.monotonic() + engine.timeout
    while True:
        try:
            await engine.run(f"remove sandbox {sandbox_id}", remove)
            return
        except docker.errors.NotFound:
            return
        except SandboxError as exc:
            if REMOVAL_IN_PROGRESS not in str(exc) or time.monotonic() > deadline:
                raise
        await asyncio.sleep(RETRY_SECONDS)


async def _thaw(engine: DockerEngine, sandbox_id: str, name: str) -> None:
    """Unpause a paused container before its removal. runsc does not end a frozen sandbox on
    ``docker rm -f``: the removal waited out its time limit (10 s) and the runtime's processes
    were then killed, while the request that asked for it hung; thawed, it goes at once
    (0.3 s, as under runc). Best effort: whatever fails here, the removal still follows."""
    try:
        raw = await engine.run(
            f"inspect sandbox {sandbox_id}", lambda: engine.client.api.inspect_container(name)
        )
        if raw.get("State", {}).get("Paused"):
            await engine.run(
                f"unpause sandbox {sandbox_id}", lambda: engine.client.api.unpause(name)
            )
    except (docker.errors.NotFound, SandboxError) as exc:
        log.debug("sandbox %s not thawed before its removal: %s", sandbox_id, exc)


async def _kill_runtime_processes(engine: DockerEngine, name: str) -> None:
    try:
        raw = await engine.run(f"inspect {name}", lambda: engine.client.api.inspect_container(name))
    except docker.errors.NotFound:
        return
    kill_runsc_processes({raw["Id"]})
