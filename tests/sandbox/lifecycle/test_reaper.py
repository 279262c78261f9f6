"""The reaper removes what a crash left behind, and nothing else."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from jupyter_sandbox.protocol.errors import SandboxNotFoundError
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.lifecycle.reaper import reap_orphans
from jupyter_sandbox.sandbox.manager import SandboxManager
from tests.conftest import manager_config, remove_everything_under, remove_state_dir

pytestmark = pytest.mark.integration


async def test_container_whose_state_is_gone_is_reaped(
    manager: SandboxManager, state_dir: Path, purpose: str
) -> None:
    orphan = await manager.create("alice", runtime="runc", purpose=purpose)
    healthy = await manager.create("alice", runtime="runc", purpose=purpose)
    SandboxDirectory(
        state_dir, orphan.sandbox_id
    ).remove()  # as if the host lost the sandbox's state

    report = await reap_orphans(manager, grace=0)

    assert report.containers == [orphan.sandbox_id]
    with pytest.raises(SandboxNotFoundError):
        await manager.get("alice", orphan.sandbox_id)
    assert (await manager.get("alice", healthy.sandbox_id)).running


async def test_exited_sandbox_is_reaped_with_its_directory(
    manager: SandboxManager, state_dir: Path, purpose: str
) -> None:
    sandbox = await manager.create("alice", runtime="runc", purpose=purpose)
    await manager.backend.stop(sandbox.sandbox_id, timeout=1)

    report = await reap_orphans(manager, grace=0)

    assert report.containers == [sandbox.sandbox_id]
    assert not (state_dir / sandbox.sandbox_id).exists()


async def test_stale_directory_is_removed_but_a_young_one_is_spared(
    manager: SandboxManager, state_dir: Path
) -> None:
    stale = state_dir / "0123456789ab"
    (stale / "io").mkdir(parents=True)
    assert (await reap_orphans(manager, grace=3600)).directories == []
    assert stale.exists()
    assert (await reap_orphans(manager, grace=0)).directories == ["0123456789ab"]
    assert not stale.exists()


async def test_another_state_directory_is_never_touched(
    manager: SandboxManager, purpose: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    other_dir = Path(tmp_path_factory.mktemp("other", numbered=True))
    short = Path("/tmp") / f"jsbx-other-{other_dir.name}"
    short.mkdir()
    other = SandboxManager.from_config(manager_config(short))
    try:
        theirs = await other.create("alice", runtime="runc", purpose=purpose)
        SandboxDirectory(
            short, theirs.sandbox_id
        ).remove()  # an orphan, but of another state directory
        report = await reap_orphans(manager, grace=0)
        assert theirs.sandbox_id not in report.containers
        assert (await other.get("alice", theirs.sandbox_id)).running
    finally:
        await remove_everything_under(other, short)
        await other.close()
        remove_state_dir(short)


def stamp(seconds_from_now: float) -> str:
    moment = datetime.datetime.now(datetime.timezone.utc)
    return (moment + datetime.timedelta(seconds=seconds_from_now)).isoformat()


async def test_a_sandbox_past_its_timeout_is_reaped_and_one_before_it_is_not(
    manager: SandboxManager, state_dir: Path, runtime: str, purpose: str
) -> None:
    """With no server, nothing else applies a timeout a client gave (``expires``, as POST
    /api/sandboxes records it)."""
    expired = await manager.create("alice", runtime=runtime, purpose=purpose)
    later = await manager.create("alice", runtime=runtime, purpose=purpose)
    manager.update_state(expired.sandbox_id, expires=stamp(-1))
    manager.update_state(later.sandbox_id, expires=stamp(3600))

    report = await reap_orphans(manager)

    assert report.containers == [expired.sandbox_id]
    with pytest.raises(SandboxNotFoundError):
        await manager.get("alice", expired.sandbox_id)
    assert (await manager.get("alice", later.sandbox_id)).running
