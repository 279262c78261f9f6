"""SandboxUsage: operations in a sandbox count as its activity, and keep it in use meanwhile;
what is kept of a sandbox goes when it is removed, whoever removes it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.lifecycle.culler import SandboxCuller
from jupyter_sandbox.sandbox.lifecycle.reaper import reap_orphans
from jupyter_sandbox.sandbox.lifecycle.usage import RECORD_INTERVAL, SandboxUsage
from jupyter_sandbox.sandbox.manager import SandboxManager
from tests.conftest import manager_config

SANDBOX = "0123456789ab"


@pytest.fixture
def directory(tmp_path: Path) -> SandboxDirectory:
    directory = SandboxDirectory(tmp_path, SANDBOX)
    directory.root.mkdir()
    directory.update_state(last_activity="2026-01-01T00:00:00+00:00")
    return directory


def usage_of(directory: SandboxDirectory, interval: float = RECORD_INTERVAL) -> SandboxUsage:
    def update_state(sandbox_id: str, **changes: Any) -> dict[str, Any]:
        assert sandbox_id == SANDBOX
        return directory.update_state(**changes)

    return SandboxUsage(update_state, interval)


def test_an_operation_is_recorded_at_its_start_and_end_and_in_use_between(
    directory: SandboxDirectory,
) -> None:
    usage = usage_of(directory, interval=0)  # every record written
    with usage.using(SANDBOX):
        began = directory.read_state()["last_activity"]
        assert began > "2026-01-01"
        assert usage.in_use(SANDBOX)
        with usage.using(SANDBOX):  # two at once: in use until both end
            pass
        assert usage.in_use(SANDBOX)
        directory.update_state(last_activity="2026-01-01T00:00:00+00:00")
    assert not usage.in_use(SANDBOX)
    assert directory.read_state()["last_activity"] > "2026-01-01"


def test_a_failed_operation_ends_its_use_too(directory: SandboxDirectory) -> None:
    usage = usage_of(directory)
    with pytest.raises(RuntimeError), usage.using(SANDBOX):
        raise RuntimeError("the command failed")
    assert not usage.in_use(SANDBOX)


def test_a_removed_sandbox_is_no_error(tmp_path: Path) -> None:
    usage = usage_of(SandboxDirectory(tmp_path, SANDBOX))  # never made: writing its state fails
    with usage.using(SANDBOX):
        assert usage.in_use(SANDBOX)
    assert not usage.in_use(SANDBOX)


def test_operations_in_a_row_are_recorded_at_most_once_an_interval(
    directory: SandboxDirectory,
) -> None:
    usage = usage_of(directory, interval=0.3)
    long_ago = "2026-01-01T00:00:00+00:00"
    with usage.using(SANDBOX):  # the first is recorded
        pass
    assert directory.read_state()["last_activity"] > long_ago
    directory.update_state(last_activity=long_ago)
    for _ in range(3):  # within the interval: not written again
        with usage.using(SANDBOX):
            assert usage.in_use(SANDBOX)  # in use all the same
    assert directory.read_state()["last_activity"] == long_ago
    usage.record(SANDBOX)  # a plain record is always written
    assert directory.read_state()["last_activity"] > long_ago
    directory.update_state(last_activity=long_ago)
    time.sleep(0.3)
    with usage.using(SANDBOX):  # the interval has passed
        assert directory.read_state()["last_activity"] > long_ago


def test_a_forgotten_sandbox_leaves_nothing_even_while_an_operation_ends(
    directory: SandboxDirectory,
) -> None:
    usage = usage_of(directory)
    with usage.using(SANDBOX):
        pass
    assert usage.tracked() == {SANDBOX}
    usage.forget(SANDBOX)
    assert usage.tracked() == set()

    with usage.using(SANDBOX):
        directory.remove()  # removed while a command runs in it
        usage.forget(SANDBOX)
        assert usage.in_use(SANDBOX)  # its count stays until the command ends
    assert not usage.in_use(SANDBOX)
    assert usage.tracked() == set()


def test_forget_all_but_the_sandboxes_that_exist() -> None:
    usage = SandboxUsage(lambda sandbox_id, **changes: changes)
    gone, there = "0" * 12, "1" * 12
    usage.record(gone)
    usage.record(there)
    usage.forget_all_but([there, "2" * 12])
    assert usage.tracked() == {there}


@pytest.mark.integration
@pytest.mark.runc
async def test_a_removed_sandbox_is_forgotten_whoever_removes_it(
    manager: SandboxManager, state_dir: Path, purpose: str
) -> None:
    """This process's manager and reaper forget at once; another process's removal (a kernel
    its ephemeral sandbox, the CLI) is forgotten at the culler's next pass."""
    removed, reaped, elsewhere, kept = await asyncio.gather(
        *(manager.create("alice", runtime="runc", purpose=purpose) for _ in range(4))
    )
    for sandbox in (removed, reaped, elsewhere, kept):
        await manager.exec("alice", sandbox.sandbox_id, ["true"])
    ids = {s.sandbox_id for s in (removed, reaped, elsewhere, kept)}
    assert manager.usage.tracked() == ids

    await manager.remove("alice", removed.sandbox_id)
    await manager.backend.stop(reaped.sandbox_id, timeout=1)
    assert (await reap_orphans(manager, grace=0)).containers == [reaped.sandbox_id]
    assert manager.usage.tracked() == {elsewhere.sandbox_id, kept.sandbox_id}

    other = SandboxManager.from_config(manager_config(state_dir))
    try:
        await other.remove("alice", elsewhere.sandbox_id)
    finally:
        await other.close()
    assert await SandboxCuller(manager).cull_once() == []
    assert manager.usage.tracked() == {kept.sandbox_id}
