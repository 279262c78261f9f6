"""Memory snapshot routes against a real server and a real runsc sandbox."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jupyter_sandbox.server_extension import SandboxExtension
from tests.kernel_client import output_of
from tests.server_extension.conftest import Fetch, api

pytestmark = [pytest.mark.integration, pytest.mark.runsc]


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    settings = {**jp_server_config["SandboxSettings"], "memory_snapshots": True}
    return {
        **jp_server_config,
        "SandboxSettings": settings,
        "Snapshots": {"snapshot_dir": str(tmp_path / "snapshots")},
    }


async def test_checkpoint_list_restore_delete(jp_fetch: Fetch, extension: SandboxExtension) -> None:
    status, made = await api(jp_fetch, "POST", body={"runtime": "runsc"})
    assert status == 201, made
    source = made["id"]
    manager = extension.manager
    await output_of((await manager.attach(made["owner"], source)).connection_info, "x = 42")

    status, error = await api(jp_fetch, "POST", source, "snapshots", body={"leave_running": True})
    assert (status, error["code"]) == (400, "invalid_request")  # workspace snapshots: no
    status, snapshot = await api(
        jp_fetch, "POST", source, "snapshots", body={"kind": "memory", "leave_running": True}
    )
    assert status == 201, snapshot
    assert snapshot["kind"] == "memory"
    assert snapshot["left_running"] is True
    status, listed = await api(jp_fetch, "GET", root="snapshots")
    assert (status, [s["id"] for s in listed]) == (200, [snapshot["id"]])
    status, error = await api(jp_fetch, "GET", snapshot["id"], "download", root="snapshots")
    assert (status, error["code"]) == (400, "invalid_request")
    status, error = await api(
        jp_fetch, "POST", snapshot["id"], "restore", body={"sandbox": "0" * 12}, root="snapshots"
    )
    assert (status, error["code"]) == (400, "invalid_request")

    await output_of((await manager.attach(made["owner"], source)).connection_info, "x = 7")
    status, restored = await api(jp_fetch, "POST", snapshot["id"], "restore", root="snapshots")
    assert (status, restored) == (200, {"snapshot": snapshot["id"], "sandbox": source})
    sandbox = await manager.attach(made["owner"], source)
    assert await output_of(sandbox.connection_info, "print(x)") == "42"

    status, _ = await api(jp_fetch, "DELETE", snapshot["id"], root="snapshots")
    assert status == 204
    assert await api(jp_fetch, "GET", root="snapshots") == (200, [])
