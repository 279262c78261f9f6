"""Removing a sandbox's container for good, even when its runtime hangs.

``docker rm -f`` is the whole story for a healthy container. A runsc sandbox whose start hung
(seen with ``--platform=kvm``) blocks that removal until its runtime processes are gone, so after
one time limit the runsc processes of that container are killed (runtime_processes.py) and the
removal asked for again. So is a container wedged by a pause among starting execs
(exec_gate.py): its cgroup is thawed by hand, and the engine answers again. The removal itself
waits for the execs that this process is starting in the container, and holds off new ones, then
until every exec the engine has for it has a process or has ended, as a pause does: under
runsc, a removal racing exec starts can take minutes (exec_gate.py).

The engine may still be carrying out the first request, which it answers with "already in
progress". That is not a conflict for the caller: the container is on its way out. The removal
then watches the engine's list until the container has left it (or is no longer being removed,
when it is asked for again), up to :data:`ENGINE_REMOVING_LIMITS` engine time limits. A runsc sandbox holding
dozens of commands and streams was seen taking minutes to leave under load. A container that
is already gone (404) counts as removed, so removal can be repeated safely.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import docker.errors

from jupyter_sandbox.protocol.errors import EngineTimeoutError, SandboxError
from jupyter_sandbox.sandbox import labels
from jupyter_sandbox.sandbox.backends.docker.engine import DockerEngine
from jupyter_sandbox.sandbox.backends.docker.exec_gate import wait_for_exec_processes
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
RETRY_SECONDS = 0.5  # between two looks at a removal that is not done yet
# How long a removal the engine is already carrying out is waited for, in engine time limits
# (DockerEngine.timeout): past it the caller gets an EngineTimeoutError that says the container
# is still on its way out.
ENGINE_REMOVING_LIMITS = 4


async def remove_container(engine: DockerEngine, sandbox_id: str) -> None:
    """Remove the sandbox's container and its anonymous volumes; a missing one is no error."""
    name = labels.container_name(sandbox_id)

    def remove() -> None:  # never while an exec starts in it (exec_gate.py)
        api = engine.client.api
        with engine.exec_gate.halting(name):
            # The engine answers an exec's start before the runtime has started its process,
            # so the gate alone let a removal land on execs runsc was still starting.
            with contextlib.suppress(docker.errors.NotFound):  # gone: the removal says so
                wait_for_exec_processes(api, name)
            api.remove_container(name, force=True, v=True)

    try:
        await _thaw(engine, sandbox_id, name)
        await engine.run(f"remove sandbox {sandbox_id}", remove, timeout=engine.timeout / 3)
        return
    except docker.errors.NotFound:
        return
    except (EngineTimeoutError, SandboxError) as exc:
        log.warning(
            "removing sandbox %s failed (%s); ending its runtime processes", sandbox_id, exc
        )
    await _end_runtime(engine, name)
    started = time.monotonic()
    not_reaped_until = started + engine.timeout
    removing_until = started + engine.timeout * ENGINE_REMOVING_LIMITS
    while True:
        try:
            await engine.run(f"remove sandbox {sandbox_id}", remove)
            return
        except docker.errors.NotFound:
            return
        except SandboxError as exc:
            if REMOVAL_IN_PROGRESS in str(exc):
                if time.monotonic() > removing_until:
                    raise _still_removing(engine, sandbox_id) from None
                await _engine_done_removing(engine, name, removing_until)
            elif NOT_REAPED_YET not in str(exc) or time.monotonic() > not_reaped_until:
                raise
        await asyncio.sleep(RETRY_SECONDS)


async def _engine_done_removing(engine: DockerEngine, name: str, until: float) -> None:
    """Wait while the engine's list shows the container being removed, up to ``until``; then
    the removal is asked for again (a 404 once the container is gone)."""
    while time.monotonic() < until:
        row = await _list_row(engine, name)
        if row is None or row.get("State") != "removing":
            return
        await asyncio.sleep(RETRY_SECONDS)


def _still_removing(engine: DockerEngine, sandbox_id: str) -> EngineTimeoutError:
    """The engine has the removal in hand, only slowly: not the caller's conflict."""
    return EngineTimeoutError(
        f"the container engine is still removing sandbox {sandbox_id} after "
        f"{engine.timeout * ENGINE_REMOVING_LIMITS:g}s; it goes when the engine is done. Look "
        "again later (GET /api/sandboxes/<id>, or 'jupyter sandbox list'), and see 'jupyter "
        "sandbox doctor' if it stays"
    )


async def _thaw(engine: DockerEngine, sandbox_id: str, name: str) -> None:
    """Unpause a paused container before its removal. runsc does not end a frozen sandbox on
    ``docker rm -f``: the removal waited out its time limit (10 s) and the runtime's processes
    were then killed, while the request that asked for it hung; thawed, it goes at once
    (0.3 s, as under runc). Its state is read from the engine's list, which, unlike inspect,
    answers for a wedged container too. An unpause past its time limit is such a wedged
    container, whose removal would hang as long: its EngineTimeoutError goes to the caller,
    who ends the runtime's processes and thaws it by hand at once. Whatever else fails here,
    the removal still follows."""
    try:
        row = await _list_row(engine, name)
    except (docker.errors.NotFound, SandboxError) as exc:
        log.debug("sandbox %s not thawed before its removal: %s", sandbox_id, exc)
        return
    if row is None or row.get("State") != "paused":
        return
    try:
        await engine.run(
            f"unpause sandbox {sandbox_id}",
            lambda: engine.client.api.unpause(name),
            timeout=engine.timeout / 3,
        )
    except EngineTimeoutError:
        raise
    except (docker.errors.NotFound, SandboxError) as exc:
        log.debug("sandbox %s not thawed before its removal: %s", sandbox_id, exc)


async def _end_runtime(engine: DockerEngine, name: str) -> None:
    """Kill the container's runsc processes and thaw its cgroup, where its removal hung."""
    row = await _list_row(engine, name)
    if row is not None:
        await kill_runsc_processes({row["Id"]})
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
