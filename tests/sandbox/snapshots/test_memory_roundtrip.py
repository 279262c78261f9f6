"""Memory snapshots through real runsc sandboxes: the interpreter comes back as it was."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jupyter_sandbox.protocol.errors import SandboxConflictError
from jupyter_sandbox.protocol.snapshot_errors import MemorySnapshotUnsupportedError
from jupyter_sandbox.sandbox.lifecycle.contexts import ContextLock
from jupyter_sandbox.sandbox.lifecycle.reaper import reap_orphans
from jupyter_sandbox.sandbox.manager import SandboxManager
from tests.conftest import manager_config, remove_everything_under
from tests.kernel_client import output_of
from tests.sandbox.snapshots.workspace_files import OWNER

pytestmark = [pytest.mark.integration, pytest.mark.runsc]


@pytest.fixture
async def bridged(state_dir: Path, tmp_path: Path) -> AsyncIterator[SandboxManager]:
    """A manager whose runsc sandboxes are made for memory snapshots."""
    manager = SandboxManager.from_config(manager_config(state_dir, memory_snapshots=True))
    manager.snapshots.snapshot_dir = str(tmp_path / "snapshots")
    yield manager
    await remove_everything_under(manager, state_dir)
    await manager.close()


async def test_variables_modules_and_open_files_survive(
    bridged: SandboxManager, purpose: str
) -> None:
    sandbox = await bridged.create(OWNER, runtime="runsc", context="c1", purpose=purpose)
    sid = sandbox.sandbox_id
    await output_of(
        sandbox.connection_info,
        "import colorsys; x = 42; f = open('/tmp/kept.txt', 'w+'); f.write('kept'); f.flush()",
    )
    snapshot = await bridged.snapshots.persist(OWNER, sid, kind="memory", note="x is 42")
    assert snapshot["kind"] == "memory"
    assert snapshot["note"] == "x is 42"
    assert snapshot["source"]["sandbox"] == sid
    info = await bridged.get(OWNER, sid)
    assert info.status == "exited"  # stopped: its memory is on disk, not in RAM
    assert [s["id"] for s in bridged.snapshots.list_snapshots(OWNER)] == [snapshot["id"]]

    # A checkpointed sandbox is neither an orphan nor a failed start.
    await reap_orphans(bridged, grace=0)
    assert (await bridged.get(OWNER, sid)).status == "exited"

    # The next kernel of its context resumes it.
    found = await bridged.find_context(OWNER, "c1")
    assert found is not None
    assert found.sandbox_id == sid
    assert found.running
    resumed = await bridged.attach(OWNER, sid)
    assert (
        await output_of(
            resumed.connection_info,
            "f.seek(0); print(x, 'colorsys' in dir(), f.read(), colorsys.rgb_to_hsv(1, 0, 0)[0])",
        )
        == "42 True kept 0.0"
    )

    await bridged.snapshots.delete(OWNER, snapshot["id"])
    assert bridged.snapshots.list_snapshots(OWNER) == []


async def test_leave_running_then_roll_back(bridged: SandboxManager, purpose: str) -> None:
    sandbox = await bridged.create(OWNER, runtime="runsc", purpose=purpose)
    sid = sandbox.sandbox_id
    await output_of(sandbox.connection_info, "x = 1")
    snapshot = await bridged.snapshots.checkpoint(OWNER, sid, leave_running=True)
    running = await bridged.attach(OWNER, sid)
    assert await output_of(running.connection_info, "x += 1; print(x)") == "2"

    # A kernel restart in a bridged sandbox: a fresh interpreter, behind the same bridge.
    restarted = await bridged.restart_kernel(OWNER, sid)
    assert await output_of(restarted.connection_info, "print('x' in dir())") == "False"

    rolled_back = await bridged.snapshots.restore_memory(OWNER, snapshot["id"])
    assert await output_of(rolled_back.connection_info, "print(x)") == "1"
    # A memory snapshot has no archive and no other sandbox to go to.
    with pytest.raises(Exception, match="memory snapshot"):
        bridged.snapshots.archive_path(OWNER, snapshot["id"])


async def test_refused_without_the_bridge_or_with_a_kernel_attached(
    manager: SandboxManager, bridged: SandboxManager, purpose: str
) -> None:
    plain = await manager.create(OWNER, runtime="runsc", purpose=purpose)
    with pytest.raises(MemorySnapshotUnsupportedError, match="memory_snapshots = True"):
        await manager.snapshots.checkpoint(OWNER, plain.sandbox_id)
    assert (await manager.get(OWNER, plain.sandbox_id)).running

    sandbox = await bridged.create(OWNER, runtime="runsc", context="busy", purpose=purpose)
    with (
        ContextLock(bridged.settings.state_path, OWNER, "busy"),
        pytest.raises(SandboxConflictError, match="shut that kernel down"),
    ):
        await bridged.snapshots.checkpoint(OWNER, sandbox.sandbox_id)
    # Refused before anything was touched: the kernel answers as before.
    await output_of((await bridged.attach(OWNER, sandbox.sandbox_id)).connection_info, "1")
