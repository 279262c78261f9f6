"""The use cases (sandbox/use_cases.py) against the real engine, on both runtimes: a sandbox made
with context, snapshot, metadata and deadline holds them from its first state on, and a failed
step (a restore, a context that has a sandbox) leaves nothing behind."""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from traitlets.config import Config

from jupyter_sandbox.protocol.errors import InvalidRequestError, SandboxConflictError
from jupyter_sandbox.protocol.snapshot_errors import SnapshotTooLargeError
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.lifecycle.contexts import ContextLock
from jupyter_sandbox.sandbox.lifecycle.culler import SandboxCuller
from jupyter_sandbox.sandbox.lifecycle.pool_filler import WarmPool
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.use_cases import (
    NewSandbox,
    create_sandbox,
    restart_sandbox,
    resume_sandbox,
)
from tests.conftest import manager_config, remove_everything_under
from tests.sandbox.snapshots.archives import Member, tar_bytes
from tests.sandbox.test_manager import assert_nothing_left, containers_under

pytestmark = pytest.mark.integration

OWNER = "alice"
METADATA = {"agent": "planner", "task": "t-42"}


class StateAtStart:
    """The sandbox's state file as it was when the engine was asked to start its container:
    the real backend's ``start``, with a look at the state first."""

    def __init__(self, manager: SandboxManager) -> None:
        self.seen: dict[str, dict[str, Any]] = {}
        backend = manager.backend
        start: Callable[[str], Awaitable[None]] = backend.start

        async def start_after_a_look(sandbox_id: str) -> None:
            directory = SandboxDirectory(manager.settings.state_path, sandbox_id)
            self.seen[sandbox_id] = directory.read_state()
            await start(sandbox_id)

        backend.start = start_after_a_look  # type: ignore[method-assign]


async def test_metadata_deadline_and_record_are_in_the_sandboxs_first_state(
    manager: SandboxManager, runtime: str, purpose: str
) -> None:
    culler = SandboxCuller(manager)
    at_start = StateAtStart(manager)
    before = datetime.datetime.now(datetime.timezone.utc)
    request = NewSandbox(
        runtime=runtime,
        timeout=600,
        metadata=METADATA,
        purpose=purpose,
        record={"e2b_template": "base"},
    )
    sandbox = await create_sandbox(manager, OWNER, request, culler)
    first = at_start.seen[sandbox.sandbox_id]
    assert first["metadata"] == METADATA
    assert first["e2b_template"] == "base"
    expires = datetime.datetime.fromisoformat(first["expires"])
    assert before + datetime.timedelta(seconds=600) <= expires
    assert culler.deadline(first) == expires  # the culler counts it from the start
    state = manager.read_state(sandbox.sandbox_id)
    assert (state["metadata"], state["expires"]) == (METADATA, first["expires"])
    assert state["runtime"] == runtime


async def test_a_claimed_pool_member_gets_metadata_and_deadline_with_its_claim(
    state_dir: Path, runtime: str, purpose: str
) -> None:
    manager = SandboxManager.from_config(manager_config(state_dir, runtime=runtime))
    config = Config()
    config.WarmPool.size = 1
    pool = WarmPool(manager, OWNER, purpose=purpose, config=config)
    try:
        [member] = await pool.refill()
        state = manager.read_state(member)
        assert "metadata" not in state
        assert "expires" not in state
        request = NewSandbox(context="c1", timeout=60, metadata=METADATA)
        sandbox = await create_sandbox(manager, OWNER, request, SandboxCuller(manager))
        assert sandbox.sandbox_id == member
        state = manager.read_state(member)
        assert (state["context"], state["metadata"]) == ("c1", METADATA)
        assert state["expires"]
        assert state["claimed"]
        assert await pool.drain() == []
    finally:
        await remove_everything_under(manager, state_dir)
        await manager.close()


async def test_a_context_that_has_a_sandbox_is_refused_and_nothing_is_started(
    manager: SandboxManager, runtime: str, purpose: str
) -> None:
    request = NewSandbox(runtime=runtime, context="c1", purpose=purpose)
    first = await create_sandbox(manager, OWNER, request)
    with pytest.raises(SandboxConflictError) as refused:
        await create_sandbox(manager, OWNER, request)
    assert refused.value.message == (
        f"context 'c1' already has sandbox {first.sandbox_id}: use it, or delete it first"
    )
    assert len(containers_under(manager.settings.state_path)) == 1
    # Another owner's context of the same name is no conflict.
    other = await create_sandbox(manager, "bob", request)
    assert other.sandbox_id != first.sandbox_id


async def test_a_snapshot_is_restored_into_the_new_sandbox(
    manager: SandboxManager, runtime: str, purpose: str, tmp_path: Path
) -> None:
    manager.snapshots.snapshot_dir = str(tmp_path / "snapshots")
    snapshot = await manager.snapshots.import_archive(
        OWNER, tar_bytes(Member("notes.txt", data=b"kept\n"))
    )
    request = NewSandbox(
        runtime=runtime, snapshot=snapshot["id"], metadata=METADATA, purpose=purpose
    )
    sandbox = await create_sandbox(manager, OWNER, request)
    result = await manager.exec(OWNER, sandbox.sandbox_id, ["cat", "/workspace/notes.txt"])
    assert result.stdout == b"kept\n"
    assert manager.read_state(sandbox.sandbox_id)["metadata"] == METADATA


async def test_a_restore_that_fails_leaves_no_sandbox(
    manager: SandboxManager, runtime: str, purpose: str, tmp_path: Path
) -> None:
    manager.snapshots.snapshot_dir = str(tmp_path / "snapshots")
    too_big = tar_bytes(Member("big.bin", data=bytes(2 * 1024**2)))
    snapshot = await manager.snapshots.import_archive(OWNER, too_big)
    request = NewSandbox(
        runtime=runtime,
        snapshot=snapshot["id"],
        limits={"workspace_size": "1m"},  # smaller than the snapshot's files
        metadata=METADATA,
        purpose=purpose,
    )
    with pytest.raises(SnapshotTooLargeError):
        await create_sandbox(manager, OWNER, request, SandboxCuller(manager))
    assert_nothing_left(manager.settings.state_path)
    assert await manager.list_sandboxes(OWNER) == []


async def test_a_timeout_past_the_ttl_or_without_a_culler_is_refused_before_a_start(
    manager: SandboxManager, purpose: str
) -> None:
    culler = SandboxCuller(manager, ttl=60)
    with pytest.raises(InvalidRequestError, match="outlast the server's time to live"):
        await create_sandbox(manager, OWNER, NewSandbox(timeout=120, purpose=purpose), culler)
    with pytest.raises(InvalidRequestError, match="needs a server"):
        await create_sandbox(manager, OWNER, NewSandbox(timeout=120, purpose=purpose))
    assert_nothing_left(manager.settings.state_path)


async def test_a_record_may_not_set_what_the_start_writes(manager: SandboxManager) -> None:
    request = NewSandbox(record={"owner": "mallory"})
    with pytest.raises(ValueError, match="may not set owner"):
        await create_sandbox(manager, OWNER, request)
    assert_nothing_left(manager.settings.state_path)


async def test_resume_sandbox_runs_it_again_with_a_deadline_anew(
    manager: SandboxManager, runtime: str, purpose: str
) -> None:
    culler = SandboxCuller(manager)
    sandbox = await create_sandbox(manager, OWNER, NewSandbox(runtime=runtime, purpose=purpose))
    await manager.pause(OWNER, sandbox.sandbox_id)
    manager.update_state(sandbox.sandbox_id, paused_at_timeout="2026-01-01T00:00:00+00:00")
    await resume_sandbox(manager, OWNER, sandbox.sandbox_id, 300, culler)
    assert (await manager.get(OWNER, sandbox.sandbox_id)).running
    state = manager.read_state(sandbox.sandbox_id)
    assert state["paused_at_timeout"] is None
    assert state["expires"]
    # Resumed already (by another request): still fine, and the deadline is kept.
    await resume_sandbox(manager, OWNER, sandbox.sandbox_id, None, culler)
    assert manager.read_state(sandbox.sandbox_id)["expires"] == state["expires"]


async def test_restart_sandbox_restarts_a_free_one_and_leaves_a_held_one_to_its_kernel(
    manager: SandboxManager, runtime: str, purpose: str
) -> None:
    request = NewSandbox(runtime=runtime, context="held", purpose=purpose)
    sandbox_id = (await create_sandbox(manager, OWNER, request)).sandbox_id
    await restart_sandbox(manager, OWNER, sandbox_id)
    assert manager.read_state(sandbox_id)["generation"] == 1  # a new kernel answered
    asked: list[dict[str, Any]] = []

    async def refuse(state: dict[str, Any]) -> bool:
        asked.append(state)
        return False  # not a kernel of this front end's

    async def restart_it(state: dict[str, Any]) -> bool:
        return True  # as a server restarting a Jupyter kernel it runs

    # A kernel holding the context (here: this process, as a proxy kernel would).
    lock = ContextLock(manager.settings.state_path, OWNER, "held")
    lock.acquire()
    try:
        with pytest.raises(SandboxConflictError, match="is in use by a running kernel"):
            await restart_sandbox(manager, OWNER, sandbox_id, refuse)
        assert [state["context"] for state in asked] == ["held"]
        await restart_sandbox(manager, OWNER, sandbox_id, restart_it)
    finally:
        lock.release()
    assert manager.read_state(sandbox_id)["generation"] == 1  # left to the kernel
    await manager.pause(OWNER, sandbox_id)
    with pytest.raises(SandboxConflictError, match="is paused: resume it first"):
        await restart_sandbox(manager, OWNER, sandbox_id)
