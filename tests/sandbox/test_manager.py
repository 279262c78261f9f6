"""SandboxManager against the real engine: ownership, bad input, cleanup after failures."""

from __future__ import annotations

from pathlib import Path

import docker
import pytest
from jupyter_client.blocking.client import BlockingKernelClient

from jupyter_sandbox.protocol.errors import (
    ImageNotFoundError,
    InvalidSettingError,
    SandboxNotFoundError,
    SandboxStartError,
    SandboxStartTimeoutError,
)
from jupyter_sandbox.sandbox.manager import SandboxManager
from tests.conftest import left_in_state_dir, manager_config, remove_everything_under
from tests.kernel.sandbox_env import containers_under as containers_in

pytestmark = pytest.mark.integration


def containers_under(state_dir: Path) -> list[str]:
    return [c.name for c in containers_in(state_dir)]


def assert_nothing_left(state_dir: Path) -> None:
    assert containers_under(state_dir) == []
    assert left_in_state_dir(state_dir) == []


async def test_plain_jupyter_client_reaches_the_kernel(
    manager: SandboxManager, purpose: str
) -> None:
    sandbox = await manager.create("alice", runtime="runc", purpose=purpose)
    client = BlockingKernelClient()
    client.load_connection_info(sandbox.connection_info)
    client.start_channels()
    try:
        reply = client.execute_interactive("x = 40 + 2", timeout=30)
        assert reply["content"]["status"] == "ok"
        reply = client.execute_interactive("x", timeout=30, user_expressions={"x": "x"})
        assert reply["content"]["user_expressions"]["x"]["data"]["text/plain"] == "42"
    finally:
        client.stop_channels()
    assert sandbox.connection_info["transport"] == "ipc"
    assert Path(sandbox.connection_info["ip"]).parent.stat().st_mode & 0o777 == 0o700


async def test_each_sandbox_gets_a_fresh_key(manager: SandboxManager, purpose: str) -> None:
    first = await manager.create("alice", runtime="runc", purpose=purpose)
    second = await manager.create("alice", runtime="runc", purpose=purpose)
    assert first.connection_info["key"] != second.connection_info["key"]
    assert len(first.connection_info["key"]) == 64


async def test_another_owner_sees_nothing(manager: SandboxManager, purpose: str) -> None:
    sandbox = await manager.create("alice", runtime="runc", purpose=purpose)
    with pytest.raises(SandboxNotFoundError):
        await manager.get("bob", sandbox.sandbox_id)
    with pytest.raises(SandboxNotFoundError):
        await manager.exec("bob", sandbox.sandbox_id, ["true"])
    assert await manager.list_sandboxes("bob") == []
    await manager.remove("bob", sandbox.sandbox_id)  # quietly nothing
    assert (await manager.get("alice", sandbox.sandbox_id)).running
    assert [s.sandbox_id for s in await manager.list_sandboxes("alice")] == [sandbox.sandbox_id]


async def test_remove_is_idempotent_and_removes_the_host_directory(
    manager: SandboxManager, state_dir: Path, purpose: str
) -> None:
    sandbox = await manager.create("alice", runtime="runc", purpose=purpose)
    assert (state_dir / sandbox.sandbox_id / "io" / "kernel.json").is_file()
    await manager.remove("alice", sandbox.sandbox_id)
    await manager.remove("alice", sandbox.sandbox_id)
    assert_nothing_left(state_dir)
    with pytest.raises(SandboxNotFoundError):
        await manager.get("alice", sandbox.sandbox_id)


async def test_missing_image_names_the_build_command(
    manager: SandboxManager, state_dir: Path
) -> None:
    with pytest.raises(ImageNotFoundError, match="jupyter sandbox build-image"):
        await manager.create("alice", image="jupyter-sandbox/no-such-image:0")
    assert_nothing_left(state_dir)


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"memory": "lots"}, "memory must be a size"),
        ({"memory": "1m"}, "below the minimum"),
        ({"cpus": 999}, "cpus must be between"),
        ({"cpus": "fast"}, "cpus must be a number"),
        ({"pids": 0}, "pids limit must be between"),
        ({"pids": "many"}, "pids must be a whole number"),
        ({"workspace_size": "1k"}, "workspace size must be at least"),
        ({"swap": "1g"}, "unknown limit"),
    ],
)
async def test_invalid_limits_are_refused_before_anything_starts(
    manager: SandboxManager, state_dir: Path, limits: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidSettingError, match=message):
        await manager.create("alice", limits=limits)
    assert_nothing_left(state_dir)


@pytest.mark.parametrize("runtime", ["kata", "runsc --platform=kvm", "RUNC"])
async def test_unknown_runtime_is_refused(
    manager: SandboxManager, state_dir: Path, runtime: str
) -> None:
    with pytest.raises(InvalidSettingError, match="runtime must be one of runsc, runc"):
        await manager.create("alice", runtime=runtime)
    assert_nothing_left(state_dir)


async def test_bad_environment_is_refused(manager: SandboxManager, state_dir: Path) -> None:
    with pytest.raises(InvalidSettingError, match="environment variable name"):
        await manager.create("alice", environment={"BAD NAME": "x"})
    assert_nothing_left(state_dir)


async def test_start_timeout_removes_everything(state_dir: Path, purpose: str) -> None:
    manager = SandboxManager.from_config(manager_config(state_dir, start_timeout=0.05))
    try:
        with pytest.raises(SandboxStartTimeoutError, match="start_timeout"):
            await manager.create("alice", runtime="runc", purpose=purpose)
        assert_nothing_left(state_dir)
    finally:
        await remove_everything_under(manager, state_dir)
        await manager.close()


async def test_a_kernel_that_cannot_start_is_reported_and_removed(
    manager: SandboxManager, state_dir: Path, purpose: str
) -> None:
    # The debootstrapped base has python3 but no ipykernel: the kernel exits at once.
    client = docker.from_env(version="auto")
    bases = [t for i in client.images.list("jupyter-sandbox/base") for t in i.tags]
    if not bases:
        pytest.skip("no debootstrapped base image (built with a registry base)")
    with pytest.raises(SandboxStartError) as failure:
        await manager.create("alice", runtime="runc", image=bases[0], purpose=purpose)
    assert "did not start" in failure.value.message
    assert_nothing_left(state_dir)
