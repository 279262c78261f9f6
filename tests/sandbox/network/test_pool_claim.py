"""A warm pool member (made without network) gets the claimer's network policy at the claim."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from traitlets.config import Config

from jupyter_sandbox.sandbox.backends.base import ExecOptions
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.lifecycle.pool_filler import WarmPool
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.network import proxy_running
from tests.conftest import manager_config, remove_everything_under
from tests.sandbox.network.servers import FETCH, RecordingServer, recording_server

pytestmark = pytest.mark.integration


@pytest.fixture
def launch_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="jsbx-nb-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def server() -> Iterator[RecordingServer]:
    with recording_server("127.0.0.1") as s:
        yield s


async def test_a_claimed_member_gets_the_requested_policy(
    state_dir: Path, launch_dir: Path, purpose: str, server: RecordingServer
) -> None:
    config = manager_config(state_dir, runtime="runc")
    config.NetworkSettings.allow_loopback_for_tests = True
    config.NetworkSettings.test_host_addresses = {"allowed.test": "127.0.0.1"}
    manager = SandboxManager.from_config(config)
    pool_config = Config()
    pool_config.WarmPool.size = 1
    pool = WarmPool(
        manager, "alice", launch_dir=str(launch_dir), purpose=purpose, config=pool_config
    )
    try:
        [member] = await pool.refill()
        directory = SandboxDirectory(state_dir, member)
        assert not proxy_running(directory)  # members wait without network
        sandbox = await manager.create(
            "alice", launch_dir=str(launch_dir), network="allowed.test", purpose=purpose
        )
        assert sandbox.sandbox_id == member  # the pool's member, not a new sandbox
        assert proxy_running(directory)
        url = f"http://allowed.test:{server.port}/"
        result = await manager.exec(
            "alice", member, ["python", "-c", FETCH, url], ExecOptions(timeout=60)
        )
        assert result.stdout.decode().strip() == "200"
        # The next claim of the same key with no network finds a member without network too.
        [second] = await pool.refill()
        other = await manager.create("alice", launch_dir=str(launch_dir), purpose=purpose)
        assert other.sandbox_id == second
        assert (await manager.network_policy("alice", second)).mode == "none"
        assert not proxy_running(SandboxDirectory(state_dir, second))
    finally:
        await pool.drain()
        for info in await manager.list_sandboxes("alice"):
            await manager.remove("alice", info.sandbox_id)
        await remove_everything_under(manager, state_dir)
        await manager.close()
