"""The warm pool against the real engine: fill, claim, misses, concurrent claims, dead members,
adaptive keys, drain, and what the reaper does with pool members."""

from __future__ import annotations

import asyncio
import multiprocessing
import shutil
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from traitlets.config import Config

from jupyter_sandbox.protocol.errors import SandboxNotFoundError
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.lifecycle.pool import take
from jupyter_sandbox.sandbox.lifecycle.pool_directory import PoolDirectory
from jupyter_sandbox.sandbox.lifecycle.pool_filler import WarmPool
from jupyter_sandbox.sandbox.lifecycle.reaper import reap_orphans
from jupyter_sandbox.sandbox.manager import SandboxManager
from tests.conftest import manager_config, remove_everything_under

pytestmark = pytest.mark.integration


@pytest.fixture
def launch_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="jsbx-nb-", dir="/tmp"))
    (path / "beside.txt").write_text("next to the notebook\n")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def runc_manager(state_dir: Path) -> AsyncIterator[SandboxManager]:
    manager = SandboxManager.from_config(manager_config(state_dir, runtime="runc"))
    yield manager
    await remove_everything_under(manager, state_dir)
    await manager.close()


def warm_pool(
    manager: SandboxManager, launch_dir: Path, purpose: str, size: int = 1, **traits: object
) -> WarmPool:
    config = Config()
    config.WarmPool.size = size
    for name, value in traits.items():
        config.WarmPool[name] = value
    return WarmPool(manager, "alice", launch_dir=str(launch_dir), purpose=purpose, config=config)


async def test_a_claimed_member_gets_the_claimers_context_and_leaves_the_pool(
    state_dir: Path, runtime: str, launch_dir: Path, purpose: str
) -> None:
    manager = SandboxManager.from_config(manager_config(state_dir, runtime=runtime))
    pool = warm_pool(manager, launch_dir, purpose)
    try:
        [member] = await pool.refill()
        assert pool.members() != {}
        state = SandboxDirectory(state_dir, member).read_state()
        assert state["context"] is None
        assert "claimed" not in state

        started = time.perf_counter()
        sandbox = await manager.create(
            "alice", context="c1", ephemeral=True, launch_dir=str(launch_dir), notebook="a.ipynb"
        )
        claim_seconds = time.perf_counter() - started

        assert sandbox.sandbox_id == member
        assert sandbox.kernel_info["status"] == "ok"
        assert claim_seconds < 1.0, claim_seconds
        state = SandboxDirectory(state_dir, member).read_state()
        assert (state["context"], state["ephemeral"], state["notebook"]) == ("c1", True, "a.ipynb")
        assert state["claimed"]
        assert all(ids == [] for ids in pool.members().values())
        assert (await manager.find_context("alice", "c1")) is not None
        result = await manager.exec("alice", member, ["cat", "/workspace/beside.txt"])
        assert result.stdout == b"next to the notebook\n"
        assert await pool.drain() == []  # the claimed member is not the pool's any more
        assert (await manager.get("alice", member)).running
    finally:
        await remove_everything_under(manager, state_dir)
        await manager.close()


async def test_claims_miss_for_another_owner_launch_dir_runtime_or_limits(
    runc_manager: SandboxManager, state_dir: Path, launch_dir: Path, purpose: str
) -> None:
    pool = warm_pool(runc_manager, launch_dir, purpose)
    [member] = await pool.refill()
    other_dir = launch_dir / "sub"
    other_dir.mkdir()
    same = {"runtime": "runc", "launch_dir": str(launch_dir)}
    misses = [
        ("bob", same),
        ("alice", {**same, "launch_dir": str(other_dir)}),
        ("alice", {**same, "runtime": "runsc"}),
        ("alice", {**same, "limits": {"memory": "1g"}}),
        ("alice", {**same, "environment": {"EXTRA": "1"}}),
    ]
    for owner, request in misses:
        assert (
            await runc_manager.claim_from_pool(runc_manager.check_request(owner, **request)) is None
        ), (owner, request)
    assert pool.members() == {next(iter(pool.members())): [member]}
    claimed = await runc_manager.claim_from_pool(runc_manager.check_request("alice", **same))
    assert claimed is not None
    assert claimed.sandbox_id == member


def _claim_in_another_process(
    state_dir: str, launch_dir: str, worker: int, barrier: threading.Barrier
) -> str:
    """One kernel start's claim, in its own process with its own manager: the sandbox id or ''."""

    async def claim() -> str:
        manager = SandboxManager.from_config(manager_config(Path(state_dir), runtime="runc"))
        try:
            await asyncio.to_thread(barrier.wait, 120)  # all processes claim at the same moment
            request = manager.check_request("alice", launch_dir=launch_dir)
            sandbox = await manager.claim_from_pool(request, context=f"worker-{worker}")
            return sandbox.sandbox_id if sandbox else ""
        finally:
            await manager.close()

    return asyncio.run(claim())


async def test_twenty_concurrent_claims_never_share_a_member(
    runc_manager: SandboxManager, state_dir: Path, launch_dir: Path, purpose: str
) -> None:
    pool = warm_pool(runc_manager, launch_dir, purpose, size=5)
    members = await pool.refill()
    assert len(members) == 5

    # Real kernel starts are separate processes; a fork server started with this module loaded
    # makes twenty of them quickly.
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    with context.Manager() as shared, context.Pool(20) as processes:
        barrier = shared.Barrier(20)
        results = await asyncio.to_thread(
            processes.starmap,
            _claim_in_another_process,
            [(str(state_dir), str(launch_dir), worker, barrier) for worker in range(20)],
            1,
        )

    claimed = [r for r in results if r]
    assert sorted(claimed) == sorted(members), results  # each member exactly once
    assert results.count("") == 15
    for worker, sandbox_id in enumerate(results):
        if sandbox_id:
            state = SandboxDirectory(state_dir, sandbox_id).read_state()
            assert state["context"] == f"worker-{worker}"
    assert all(ids == [] for ids in pool.members().values())


async def test_a_dead_member_is_skipped_and_removed(
    runc_manager: SandboxManager, state_dir: Path, launch_dir: Path, purpose: str
) -> None:
    pool = warm_pool(runc_manager, launch_dir, purpose, size=2)
    dead, alive = await pool.refill()  # claims try the oldest ticket first: the dead one
    await runc_manager.backend.stop(dead, timeout=1)

    sandbox = await runc_manager.create("alice", launch_dir=str(launch_dir))

    assert sandbox.sandbox_id == alive
    with pytest.raises(SandboxNotFoundError):
        await runc_manager.get("alice", dead)
    assert not (state_dir / dead).exists()
    assert (
        await runc_manager.claim_from_pool(
            runc_manager.check_request("alice", launch_dir=str(launch_dir))
        )
        is None
    )


async def test_missed_keys_are_kept_warm_least_recent_dropped_and_drain_removes_the_rest(
    runc_manager: SandboxManager, state_dir: Path, launch_dir: Path, purpose: str
) -> None:
    pool = warm_pool(runc_manager, launch_dir, purpose, max_keys=1)
    assert (
        await runc_manager.claim_from_pool(
            runc_manager.check_request("alice", launch_dir=str(launch_dir))
        )
        is None
    )
    [default_member] = await pool.refill()  # the refiller now runs: misses are recorded
    dir_a, dir_b = launch_dir / "a", launch_dir / "b"
    dir_a.mkdir()
    dir_b.mkdir()

    miss_a = await runc_manager.create("alice", launch_dir=str(dir_a), purpose=purpose)
    [member_a] = await pool.refill()
    hit_a = await runc_manager.create("alice", launch_dir=str(dir_a))
    assert hit_a.sandbox_id == member_a  # the second notebook in a/ starts warm
    [member_a2] = await pool.refill()

    miss_b = await runc_manager.create("alice", launch_dir=str(dir_b), purpose=purpose)
    [member_b] = await pool.refill()  # max_keys=1: b/ is newer, a/ dropped with its member
    with pytest.raises(SandboxNotFoundError):
        await runc_manager.get("alice", member_a2)
    assert len(PoolDirectory(state_dir).wanted()) == 1

    taken = await runc_manager.claim_from_pool(
        runc_manager.check_request("alice", launch_dir=str(dir_b))
    )
    assert taken is not None
    assert taken.sandbox_id == member_b
    drained = await pool.drain()
    assert drained == [default_member]
    left = {info.sandbox_id for info in await runc_manager.list_sandboxes("alice")}
    assert left == {miss_a.sandbox_id, hit_a.sandbox_id, miss_b.sandbox_id, member_b}
    assert all(ids == [] for ids in pool.members().values())


async def test_drain_spares_a_member_being_claimed(
    runc_manager: SandboxManager, state_dir: Path, launch_dir: Path, purpose: str
) -> None:
    pool = warm_pool(runc_manager, launch_dir, purpose, size=2)
    being_claimed, unclaimed = await pool.refill()
    assert take(SandboxDirectory(state_dir, being_claimed), "claim")
    assert await pool.drain() == [unclaimed]
    assert (await runc_manager.get("alice", being_claimed)).running


async def test_reaper_spares_waiting_members_and_reaps_those_that_lost_their_claimer(
    runc_manager: SandboxManager, state_dir: Path, launch_dir: Path, purpose: str
) -> None:
    pool = warm_pool(runc_manager, launch_dir, purpose, size=3)
    waiting, crashed_claim, lost_ticket = await pool.refill()
    assert (await reap_orphans(runc_manager, grace=0)).containers == []  # tickets: spared

    key = next(iter(pool.members()))
    # A claimer died between taking the member and recording its claim:
    assert take(SandboxDirectory(state_dir, crashed_claim), "claim")
    PoolDirectory(state_dir).remove_ticket(key, crashed_claim)
    # A member that lost its ticket some other way:
    PoolDirectory(state_dir).remove_ticket(key, lost_ticket)

    assert not (await reap_orphans(runc_manager, grace=3600)).containers  # still young
    report = await reap_orphans(runc_manager, grace=0)
    assert sorted(report.containers) == sorted([crashed_claim, lost_ticket])
    assert (await runc_manager.get("alice", waiting)).running
    assert pool.members() == {key: [waiting]}


async def test_start_refills_in_the_background_and_only_one_process_refills(
    runc_manager: SandboxManager, state_dir: Path, launch_dir: Path, purpose: str
) -> None:
    pool = warm_pool(runc_manager, launch_dir, purpose, refill_interval=0.2)
    second = warm_pool(runc_manager, launch_dir, purpose)  # e.g. another server of alice's
    try:
        assert await pool.start()
        assert not await second.start()
        for _ in range(100):
            if any(pool.members().values()):
                break
            await asyncio.sleep(0.1)
        [[member]] = pool.members().values()
        claimed = await runc_manager.create("alice", launch_dir=str(launch_dir))
        assert claimed.sandbox_id == member
        for _ in range(100):  # replaced at the next check
            if any(pool.members().values()):
                break
            await asyncio.sleep(0.1)
        [[replacement]] = pool.members().values()
        assert await second.drain() == []  # not its pool
    finally:
        drained = await pool.drain()
    assert drained == [replacement]
    assert (await runc_manager.get("alice", claimed.sandbox_id)).running
