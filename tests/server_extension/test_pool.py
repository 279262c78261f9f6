"""The warm pool behind the server: concurrent kernel starts, claims, drain at stop."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.server_extension import SandboxExtension
from tests.server_extension.conftest import Fetch, api

pytestmark = pytest.mark.integration

POOL_SIZE = 5
KERNELS = 20


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    return {
        **jp_server_config,
        "WarmPool": {"size": POOL_SIZE},
        # Every quota off: 20 kernels' sandboxes at their default limits exceed each of them.
        "SandboxQuotas": {
            "max_sandboxes": 0,
            "max_memory": "",
            "max_cpus": 0.0,
            "max_pids": 0,
            "max_tmp_size": "",
            "max_workspace_size": "",
        },
    }


async def start_kernel(fetch: Fetch, serverapp: Any, notebook: str) -> str:
    """Open ``notebook`` as JupyterLab does (a session), and wait until its kernel answers."""
    session = {"path": notebook, "type": "notebook", "kernel": {"name": "sandboxed-python"}}
    response = await fetch("api", "sessions", method="POST", body=json.dumps(session))
    kernel_id: str = json.loads(response.body)["kernel"]["id"]
    client = serverapp.kernel_manager.get_kernel(kernel_id).client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=240)
    finally:
        client.stop_channels()
    return kernel_id


async def test_concurrent_kernel_starts_never_share_a_sandbox(
    kernel_env: dict[str, str], jp_fetch: Fetch, jp_serverapp: Any, extension: SandboxExtension
) -> None:
    filled = await extension.pool.refill()
    assert len(filled) == POOL_SIZE
    assert await api(jp_fetch, "GET") == (200, [])  # waiting members are nobody's yet

    kernel_ids = await asyncio.gather(
        *(start_kernel(jp_fetch, jp_serverapp, f"notebook-{i}.ipynb") for i in range(KERNELS))
    )
    try:
        _, listed = await api(jp_fetch, "GET")
        attached = sorted(s["kernel"]["id"] for s in listed)
        assert attached == sorted(kernel_ids)  # one sandbox per kernel, none shared
        claimed = [s["id"] for s in listed if extension.manager.read_state(s["id"]).get("claimed")]
        assert sorted(claimed) == sorted(filled)  # each member went to exactly one kernel
    finally:
        await asyncio.gather(*(jp_fetch("api", "kernels", k, method="DELETE") for k in kernel_ids))
    assert await api(jp_fetch, "GET") == (200, [])


async def test_the_pool_drains_when_the_server_stops(
    jp_serverapp: Any, extension: SandboxExtension, manager: SandboxManager
) -> None:
    await extension._start_jupyter_server_extension(jp_serverapp)
    for _ in range(120):
        if sum(map(len, extension.pool.members().values())) == POOL_SIZE:
            break
        await asyncio.sleep(0.5)
    else:
        pytest.fail(f"the pool did not fill: {extension.pool.members()}")
    await extension.stop_extension()
    assert extension.pool.members() == {}
    # The extension's manager is closed now; look with another one on the same state directory.
    remaining = await manager.backend.list_sandboxes()
    assert not [s for s in remaining if manager.holds(s)]
