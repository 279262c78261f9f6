"""Restores take their owner's archive turn in the core, whatever asked for them: a new
sandbox from a snapshot (POST /api/sandboxes with one) waits for it as the restore requests do."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_sandbox.sandbox.backends.base import ExecOptions
from jupyter_sandbox.sandbox.host.fair_share import FairShare
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.snapshots.service import Snapshots
from tests.sandbox.snapshots.archives import Member, tar_bytes

pytestmark = pytest.mark.integration


@pytest.fixture
def snapshots(manager: SandboxManager, tmp_path: Path) -> Snapshots:
    manager.snapshots.snapshot_dir = str(tmp_path / "snapshots")
    return manager.snapshots


@pytest.mark.checklist(
    row=148,
    attack="an owner asks for many new sandboxes from a snapshot at once (POST /api/sandboxes "
    "with a snapshot), each restore hashing and scanning its archive, beside no restore request",
    expected="each restore takes one of the owner's archive turns, as the restore requests do: "
    "past the owner's share they wait; another owner's restore is served at once",
)
async def test_a_new_sandbox_from_a_snapshot_waits_for_its_owners_archive_turn(
    manager: SandboxManager, snapshots: Snapshots, runtime: str, purpose: str, observe: Any
) -> None:
    turns = FairShare(total=4, per_owner=1)
    snapshots.archive_turns = turns  # as the server extension hands its own
    alices = await snapshots.import_archive("alice", tar_bytes(Member("a.txt", data=b"alice")))
    bobs = await snapshots.import_archive("bob", tar_bytes(Member("b.txt", data=b"bob")))
    bob = await manager.create("bob", runtime=runtime, purpose=purpose)

    held = await turns.acquire("alice")  # her one turn, taken by another restore of hers
    creating = asyncio.ensure_future(
        snapshots.create_sandbox("alice", alices["id"], runtime=runtime, purpose=purpose)
    )
    try:
        deadline = time.monotonic() + 120
        while not turns.waiting():  # its sandbox starts, then its restore waits for the turn
            assert not creating.done(), "the new sandbox was restored without an archive turn"
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        summary = await asyncio.wait_for(snapshots.hydrate("bob", bobs["id"], bob.sandbox_id), 60)
        assert summary.members == 1
        assert not creating.done()
    except BaseException:
        creating.cancel()
        await asyncio.gather(creating, return_exceptions=True)
        raise
    finally:
        turns.release(held)
    alice = await asyncio.wait_for(creating, 120)
    result = await manager.exec(
        "alice", alice.sandbox_id, ["cat", "/workspace/a.txt"], ExecOptions(timeout=30)
    )
    assert result.stdout == b"alice"
    assert turns.held == {}
    observe("alice's restore into a new sandbox waited for her turn; bob's was served at once")
