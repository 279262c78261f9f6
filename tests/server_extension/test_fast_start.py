"""The zygote behind the server: kernels the server starts are forked, and it stops with it."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from jupyter_sandbox.server_extension import SandboxExtension
from jupyter_sandbox.server_extension.fast_start import ZYGOTE_ENV
from tests.kernel.test_zygote import children_of, wait_gone
from tests.server_extension.conftest import Fetch

pytestmark = [pytest.mark.integration, pytest.mark.runc]


async def test_server_kernels_are_forked_and_the_zygote_stops_with_the_server(
    kernel_env: dict[str, str], jp_fetch: Fetch, jp_serverapp: Any, extension: SandboxExtension
) -> None:
    await extension._start_jupyter_server_extension(jp_serverapp)
    zygote = extension.zygote
    assert zygote is not None
    assert zygote.process is not None
    assert await zygote.wait_ready()
    assert os.environ[ZYGOTE_ENV] == str(zygote.path)
    assert zygote.path.stat().st_mode & 0o777 == 0o600
    assert zygote.path.parent.stat().st_mode & 0o777 == 0o700

    response = await jp_fetch(
        "api", "kernels", method="POST", body=json.dumps({"name": "sandboxed-python"})
    )
    kernel_id = json.loads(response.body)["id"]
    kernel = jp_serverapp.kernel_manager.get_kernel(kernel_id)
    client = kernel.client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=120)
        [forked] = children_of(zygote.process.pid)
        launcher = kernel.provisioner.process.pid
        assert forked != launcher  # the launcher stands in for the forked kernel
        # A restart through the server: a new launcher, a new fork, the same sandbox.
        await jp_serverapp.kernel_manager.restart_kernel(kernel_id)
        await client.wait_for_ready(timeout=120)
        assert wait_gone(forked)
        [forked] = children_of(zygote.process.pid)
    finally:
        client.stop_channels()
        await jp_fetch("api", "kernels", kernel_id, method="DELETE")
    assert wait_gone(forked)

    process = zygote.process
    await extension.stop_extension()
    assert process.poll() is not None  # the zygote itself is gone
    assert children_of(process.pid) == []
    assert not zygote.path.exists()
    assert ZYGOTE_ENV not in os.environ
    assert extension.zygote is None


async def test_fast_kernel_start_can_be_turned_off(
    jp_serverapp: Any, extension: SandboxExtension
) -> None:
    extension.fast_kernel_start = False
    await extension._start_jupyter_server_extension(jp_serverapp)
    try:
        assert extension.zygote is None
        assert ZYGOTE_ENV not in os.environ
    finally:
        await extension.stop_extension()
