"""Checkpoints of a sandbox's memory (runsc only), through the engine's HTTP API directly.

docker-py has no calls for checkpoints, so these build the engine's URLs themselves, with
docker-py's own client (its session, its socket, its error translation). Docker needs its
``experimental`` mode for them; engine-bootstrap.sh turns it on. Saving or loading a kernel's
memory takes time in proportion to its size, longer than an ordinary engine call may, so each
call gets CHECKPOINT_TIMEOUT (figures: docs/explanation/performance.md, "Figures behind the
code").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import docker.errors

from jupyter_sandbox.protocol.errors import SandboxError, SandboxNotFoundError
from jupyter_sandbox.sandbox import labels
from jupyter_sandbox.sandbox.backends.docker.engine import DockerEngine

CHECKPOINT_TIMEOUT = 600.0  # seconds one checkpoint, restore or removal may take
# Seconds a checkpoint that stops its sandbox waits for the engine to report it stopped.
EXIT_WAIT = 30
# Seconds to wait before each new try of a restore the engine refused with its content-store
# race (below); three tries in all.
RESTORE_RETRY_DELAYS = (0.25, 1.0)

log = logging.getLogger(__name__)


async def checkpoint(engine: DockerEngine, sandbox_id: str, name: str, leave_running: bool) -> None:
    """Save the sandbox's memory as checkpoint ``name``; it exits unless ``leave_running``, and
    then this returns once the engine reports it stopped."""
    body = {"CheckpointID": name, "Exit": not leave_running}
    await _call(engine, sandbox_id, "checkpoint", "post", "/checkpoints", json=body)
    if not leave_running:
        await _stopped(engine, sandbox_id)


async def _stopped(engine: DockerEngine, sandbox_id: str) -> None:
    """Wait until the engine reports the sandbox not running (at most EXIT_WAIT seconds).

    The engine answers the checkpoint once it is written, and learns that the container exited
    from containerd's event a moment later; until then an inspect still says running (seen on
    a loaded machine: a snapshot's caller looked at once and found it running). Whoever looks
    after the checkpoint must see it stopped. Past the wait, the state catches up by itself:
    that is logged, not raised, as the checkpoint itself is done."""
    container = labels.container_name(sandbox_id)

    def wait() -> None:  # on the engine's thread, as every use of its client (engine.py)
        engine.client.api.wait(container, timeout=EXIT_WAIT, condition="not-running")

    try:
        await engine.run(f"wait for sandbox {sandbox_id} to stop", wait, timeout=EXIT_WAIT + 5)
    except (SandboxError, docker.errors.NotFound) as exc:
        log.warning("sandbox %s checkpointed; its stop not seen yet: %s", sandbox_id, exc)


async def start_from_checkpoint(engine: DockerEngine, sandbox_id: str, name: str) -> None:
    """Start the (stopped) sandbox from checkpoint ``name``.

    Docker copies the checkpoint into containerd's content store before it starts the task, and
    now and then containerd refuses that copy with "commit failed: content sha256:...: already
    exists" (moby/moby#42900, a race in the store's ingest, seen most right after a checkpoint).
    The container is still stopped then and nothing was started, so the same call is tried again.
    """
    for delay in (*RESTORE_RETRY_DELAYS, None):
        try:
            await _call(
                engine, sandbox_id, "restore", "post", "/start", params={"checkpoint": name}
            )
            return
        except SandboxError as exc:
            if delay is None or not _is_content_store_race(exc):
                raise
        await asyncio.sleep(delay)


def _is_content_store_race(error: SandboxError) -> bool:
    return "upload checkpoint" in error.message and "already exists" in error.message


async def remove_checkpoint(engine: DockerEngine, sandbox_id: str, name: str) -> None:
    """Delete checkpoint ``name``; one that is gone already is no error."""
    with contextlib.suppress(SandboxNotFoundError):
        await _call(engine, sandbox_id, "remove checkpoint of", "delete", f"/checkpoints/{name}")


async def _call(
    engine: DockerEngine, sandbox_id: str, what: str, method: str, path: str, **kwargs: Any
) -> None:
    def call() -> None:
        api = engine.client.api
        container = labels.container_name(sandbox_id)
        url = api._url("/containers/{0}" + path, container)  # type: ignore[attr-defined]
        response = getattr(api, f"_{method}")(url, **kwargs)
        api._raise_for_status(response)  # type: ignore[attr-defined]

    try:
        await engine.run(
            f"{what} sandbox {sandbox_id}", call, timeout=CHECKPOINT_TIMEOUT, long=True
        )
    except docker.errors.NotFound:
        raise SandboxNotFoundError(f"no sandbox {sandbox_id} (or no such checkpoint)") from None
