"""A culling or reaping pass serves every owner: one sandbox that cannot be removed does not
keep the others' from going in the same pass."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_sandbox.protocol.errors import EngineTimeoutError, SandboxNotFoundError
from jupyter_sandbox.sandbox.backends.docker.backend import DockerBackend
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.lifecycle import reaper
from jupyter_sandbox.sandbox.lifecycle.culler import SandboxCuller
from jupyter_sandbox.sandbox.manager import SandboxManager
from tests.conftest import manager_config, remove_everything_under

pytestmark = pytest.mark.integration


class WedgedFor(DockerBackend):
    """The real Docker backend, but the removal of the sandboxes in ``wedged`` fails as a
    wedged container's does (the engine's time limit), or hangs when ``hang`` is set. Only the
    failure is injected: every other sandbox is created and removed by the real engine."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.wedged: set[str] = set()
        self.hang = False

    async def remove(self, sandbox_id: str) -> None:
        if sandbox_id in self.wedged:
            if self.hang:
                await asyncio.Event().wait()
            raise EngineTimeoutError(
                f"the container engine did not finish 'remove sandbox {sandbox_id}' in time"
            )
        await super().remove(sandbox_id)


@pytest.fixture
async def wedging_manager(state_dir: Path) -> AsyncIterator[SandboxManager]:
    config = manager_config(state_dir)
    config.SandboxManager.backend_class = WedgedFor
    sandbox_manager = SandboxManager.from_config(config)
    yield sandbox_manager
    _backend(sandbox_manager).wedged.clear()
    await remove_everything_under(sandbox_manager, state_dir)
    await sandbox_manager.close()


def _backend(manager: SandboxManager) -> WedgedFor:
    backend = manager.backend
    assert isinstance(backend, WedgedFor)
    return backend


def _hours_ago() -> str:
    return (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=2)).isoformat()


async def _gone(manager: SandboxManager, owner: str, sandbox_id: str) -> bool:
    try:
        await manager.get(owner, sandbox_id)
    except SandboxNotFoundError:
        return True
    return False


@pytest.mark.checklist(
    row=146,
    attack="one owner's idle sandbox cannot be removed (its container wedged: the engine's "
    "time limit on its removal) while another owner's sandbox is due for culling too",
    expected="the culling pass logs the wedged one and goes on: the other owner's idle "
    "sandbox is removed by the engine in the same pass; the wedged one is tried again next pass",
)
async def test_a_wedged_removal_does_not_stop_the_culling_pass(
    wedging_manager: SandboxManager,
    runtime: str,
    purpose: str,
    observe: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    manager = wedging_manager
    bob = await manager.create("bob", runtime=runtime, purpose=purpose)
    alice = await manager.create("alice", runtime=runtime, purpose=purpose)
    for sandbox in (alice, bob):
        # Idle (not past a timeout, which the pass's reaping would take): the culler's own.
        manager.update_state(sandbox.sandbox_id, last_activity=_hours_ago())
    _backend(manager).wedged.add(alice.sandbox_id)
    culler = SandboxCuller(manager, idle_timeout=3600.0)

    culled = await culler.cull_once()

    assert culled == [bob.sandbox_id]
    assert await _gone(manager, "bob", bob.sandbox_id)
    assert not await _gone(manager, "alice", alice.sandbox_id)
    warnings = [r.getMessage() for r in caplog.records if alice.sandbox_id in r.getMessage()]
    assert any("could not remove" in w and "next pass" in w for w in warnings), warnings

    _backend(manager).wedged.clear()  # unwedged: the next pass removes it (its reaping,
    await culler.cull_once()  # as the failed removal took the host directory already)
    assert await _gone(manager, "alice", alice.sandbox_id)
    observe("bob's idle sandbox was removed in the pass where alice's removal failed")


async def test_a_hanging_removal_is_given_up_at_its_deadline(
    wedging_manager: SandboxManager, purpose: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = wedging_manager
    monkeypatch.setattr(reaper, "REMOVAL_DEADLINE", 1.0)
    bob = await manager.create("bob", runtime="runc", purpose=purpose)
    alice = await manager.create("alice", runtime="runc", purpose=purpose)
    for sandbox in (alice, bob):
        # Idle (not past a timeout, which the pass's reaping would take): the culler's own.
        manager.update_state(sandbox.sandbox_id, last_activity=_hours_ago())
    backend = _backend(manager)
    backend.wedged.add(alice.sandbox_id)
    backend.hang = True

    culled = await asyncio.wait_for(SandboxCuller(manager, idle_timeout=3600.0).cull_once(), 60)

    assert culled == [bob.sandbox_id]
    assert await _gone(manager, "bob", bob.sandbox_id)


async def test_a_failing_removal_does_not_stop_the_reaping_pass(
    wedging_manager: SandboxManager, state_dir: Path, purpose: str
) -> None:
    manager = wedging_manager
    bob = await manager.create("bob", runtime="runc", purpose=purpose)
    alice = await manager.create("alice", runtime="runc", purpose=purpose)
    for sandbox in (alice, bob):  # orphans: as if the host lost their state
        SandboxDirectory(state_dir, sandbox.sandbox_id).remove()
    _backend(manager).wedged.add(alice.sandbox_id)

    report = await reaper.reap_orphans(manager, grace=0)

    assert report.containers == [bob.sandbox_id]
    left = {info.sandbox_id for info in await manager.backend.list_sandboxes()}
    assert bob.sandbox_id not in left
    assert alice.sandbox_id in left
