"""/api/sandboxes/{id}/network and its audit, and ``network`` at creation, on a real server."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from jupyter_sandbox.sandbox.backends.base import ExecOptions
from jupyter_sandbox.sandbox.host.process_lock import ProcessLock
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.manager import default_owner
from jupyter_sandbox.sandbox.network.control import PROXY_LOCK
from jupyter_sandbox.server_extension import SandboxExtension
from tests.sandbox.network.servers import FETCH, RecordingServer, recording_server
from tests.server_extension.conftest import Fetch, api

pytestmark = pytest.mark.integration


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    return {
        **jp_server_config,
        "NetworkSettings": {
            "allow_loopback_for_tests": True,
            "test_host_addresses": {"allowed.test": "127.0.0.1", "other.test": "127.0.0.1"},
        },
    }


@pytest.fixture
def server() -> Iterator[RecordingServer]:
    with recording_server("127.0.0.1") as s:
        yield s


async def fetch_inside(extension: SandboxExtension, sandbox_id: str, url: str) -> str:
    result = await extension.manager.exec(
        default_owner(), sandbox_id, ["python", "-c", FETCH, url], ExecOptions(timeout=60)
    )
    return result.stdout.decode().strip()


async def test_policy_set_at_creation_changed_live_and_audited(
    jp_fetch: Fetch, extension: SandboxExtension, server: RecordingServer
) -> None:
    body = {"network": {"mode": "allowlist", "allow": ["allowed.test"]}}
    status, created = await api(jp_fetch, "POST", body=body)
    assert status == 201, created
    sandbox_id = created["id"]
    assert created["network"] == {"policy": "allowlist"}
    status, policy = await api(jp_fetch, "GET", sandbox_id, "network")
    assert (status, policy) == (
        200,
        {"mode": "allowlist", "allow": ["allowed.test"], "deny": [], "proxy_running": True},
    )
    url_allowed = f"http://allowed.test:{server.port}/"
    url_other = f"http://other.test:{server.port}/"
    assert await fetch_inside(extension, sandbox_id, url_allowed) == "200"
    assert await fetch_inside(extension, sandbox_id, url_other) == "403 not in allowlist"

    status, policy = await api(
        jp_fetch, "PUT", sandbox_id, "network", body={"mode": "open", "deny": ["allowed.test"]}
    )
    assert status == 200
    assert policy["mode"] == "open"
    assert await fetch_inside(extension, sandbox_id, url_other) == "200"
    assert await fetch_inside(extension, sandbox_id, url_allowed) == "403 deny allowed.test"

    status, audit = await api(jp_fetch, "GET", sandbox_id, "network", "audit")
    assert status == 200
    assert [(e["host"], e["allowed"]) for e in audit["entries"]] == [
        ("allowed.test", True),
        ("other.test", False),
        ("other.test", True),
        ("allowed.test", False),
    ]
    status, last = await api(jp_fetch, "GET", sandbox_id, "network", "audit", params={"limit": 1})
    assert status == 200
    assert len(last["entries"]) == 1

    directory = SandboxDirectory(extension.manager.settings.state_path, sandbox_id)
    pid = int(ProcessLock(directory.root / PROXY_LOCK).note_of_holder())
    status, policy = await api(jp_fetch, "PUT", sandbox_id, "network", body={"mode": "none"})
    assert (status, policy["mode"], policy["proxy_running"]) == (200, "none", False)
    assert not pid_alive(pid)

    await api(jp_fetch, "PUT", sandbox_id, "network", body={"mode": "open"})
    pid = int(ProcessLock(directory.root / PROXY_LOCK).note_of_holder())
    status, _ = await api(jp_fetch, "DELETE", sandbox_id)
    assert status == 204
    assert not pid_alive(pid)  # removing the sandbox ends its host proxy


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/status") as f:
        return "State:\tZ" not in f.read()  # a zombie has exited


@pytest.mark.parametrize(
    ("path", "method", "body", "says"),  # body: for GET, the query
    [
        ("network", "PUT", {"mode": "allowlist", "allow": ["*"]}, "every host"),
        ("network", "PUT", {"mode": "allowlist", "allow": ["*.org"]}, "top-level domain"),
        ("network", "PUT", {"mode": "allowlist", "allow": ["10.0.0.1"]}, "is an address"),
        ("network", "PUT", {"mode": "sometimes"}, "network.mode must be one of"),
        ("network", "PUT", "[]", "must be a JSON object"),
        ("network/audit", "GET", {"limit": 0}, "limit must be a whole number"),
        ("network/audit", "GET", {"limit": "x"}, "limit must be a whole number"),
    ],
)
async def test_bad_network_requests_say_what_to_fix(
    jp_fetch: Fetch, path: str, method: str, body: Any, says: str
) -> None:
    # Checked before the sandbox is looked up: no sandbox needed.
    sandbox_path = ["0123456789ab", *path.split("/")]
    if method == "GET":
        status, error = await api(jp_fetch, method, *sandbox_path, params=body)
    else:
        status, error = await api(jp_fetch, method, *sandbox_path, body=body)
    assert status == 400, error
    assert says in error["message"]


async def test_bad_network_at_creation_starts_nothing(
    jp_fetch: Fetch, extension: SandboxExtension
) -> None:
    status, error = await api(
        jp_fetch, "POST", body={"network": {"mode": "allowlist", "allow": ["*.com"]}}
    )
    assert status == 400
    assert "top-level domain" in error["message"]
    assert await extension.manager.list_sandboxes(default_owner()) == []


@pytest.mark.parametrize("path", ["network", "network/audit"])
async def test_unknown_sandbox_network_is_not_found(jp_fetch: Fetch, path: str) -> None:
    status, error = await api(jp_fetch, "GET", "0123456789ab", *path.split("/"))
    assert status == 404
    assert error["code"] == "sandbox_not_found"
