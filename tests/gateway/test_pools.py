"""The gateway's warm pools per hub user (jupyter_sandbox/gateway/pools.py): a user's pool
refills as that user's work in the server's fair shares (sandbox/host/fair_share.py), not as
the gateway's own. A real engine (runc), one pool member started and removed."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_sandbox.gateway.pools import UserPools
from jupyter_sandbox.sandbox.host.fair_share import current_owner
from jupyter_sandbox.sandbox.host.timeouts import within
from jupyter_sandbox.sandbox.manager import SandboxManager
from tests.conftest import manager_config, remove_everything_under

OWNER = "alice"
STARTED_WITHIN = 180.0  # seconds for the pool's first member to start on a loaded host


@pytest.fixture
def user_root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="jsbx-home-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def runc_manager(state_dir: Path) -> AsyncIterator[SandboxManager]:
    manager = SandboxManager.from_config(manager_config(state_dir, runtime="runc"))
    yield manager
    await remove_everything_under(manager, state_dir)
    await manager.close()


async def test_a_users_pool_refills_as_that_user(
    runc_manager: SandboxManager, user_root: Path, purpose: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    started = asyncio.Event()
    start_sandbox = runc_manager.start_sandbox

    async def starting(*args: Any, **kwargs: Any) -> Any:
        seen.append(current_owner.get())  # whose turn the engine's calls take
        try:
            return await start_sandbox(*args, **kwargs)
        finally:
            started.set()  # then drained whole, not cut off halfway

    monkeypatch.setattr(runc_manager, "start_sandbox", starting)
    pools = UserPools(runc_manager, purpose, size=1)
    assert current_owner.get() == ""  # the kernel start's handler sets none
    try:
        await pools.keep_warm(OWNER, user_root)
        assert current_owner.get() == ""  # nor is the caller's changed
        await within(started.wait(), STARTED_WITHIN)
        assert set(seen) == {OWNER}
    finally:
        await pools.drain()
