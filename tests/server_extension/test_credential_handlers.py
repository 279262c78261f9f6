"""/api/credentials on a real server: set, list (never a value), replace, remove, refusals."""

from __future__ import annotations

import json
import logging
import stat
from pathlib import Path
from typing import Any

import pytest

from jupyter_sandbox.sandbox.manager import default_owner
from jupyter_sandbox.sandbox.network.credentials import CredentialStore
from jupyter_sandbox.server_extension import SandboxExtension
from tests.server_extension.conftest import Fetch, api

SECRET = "tok-7c1e55a0d9-never-shown"
PASSWORD = "pw-3b8f0e2a41-never-shown"


async def credentials(fetch: Fetch, method: str, *path: str, body: Any = None) -> tuple[int, Any]:
    return await api(fetch, method, *path, body=body, root="credentials")


async def test_set_list_replace_remove_never_answers_a_value(
    jp_fetch: Fetch, extension: SandboxExtension, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    assert await credentials(jp_fetch, "GET") == (200, {"credentials": []})
    body = {"hosts": ["api.example.com"], "headers": {"Authorization": f"Bearer {SECRET}"}}
    status, made = await credentials(jp_fetch, "PUT", "gh", body=body)
    assert (status, made) == (
        201,
        {"name": "gh", "hosts": ["api.example.com"], "headers": ["Authorization"]},
    )
    basic = {"hosts": ["*.index.test:8080"], "basic": {"username": "u", "password": PASSWORD}}
    assert (await credentials(jp_fetch, "PUT", "index", body=basic))[0] == 201
    status, replaced = await credentials(
        jp_fetch, "PUT", "gh", body={**body, "hosts": ["a.test.example"]}
    )
    assert (status, replaced["hosts"]) == (200, ["a.test.example"])
    status, listed = await credentials(jp_fetch, "GET")
    assert status == 200
    assert listed == {
        "credentials": [
            {"name": "gh", "hosts": ["a.test.example"], "headers": ["Authorization"]},
            {"name": "index", "hosts": ["*.index.test:8080"], "headers": ["Authorization"]},
        ]
    }
    # Stored for the server's owner, 0600 in a 0700 directory, outside every sandbox.
    root = extension.manager.network.credentials_path
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    for path in root.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    store = CredentialStore(root)
    assert store.headers_for(default_owner(), "a.test.example", 80) == [
        ("Authorization", f"Bearer {SECRET}")
    ]
    assert await credentials(jp_fetch, "DELETE", "gh") == (204, None)
    status, error = await credentials(jp_fetch, "DELETE", "gh")
    assert (status, error["code"]) == (404, "credential_not_found")
    assert [item["name"] for item in (await credentials(jp_fetch, "GET"))[1]["credentials"]] == [
        "index"
    ]
    everything = json.dumps([listed, made, replaced, error]) + caplog.text
    assert SECRET not in everything
    assert PASSWORD not in everything


@pytest.mark.parametrize(
    ("name", "body", "says"),
    [
        ("Upper", {"hosts": ["a.example.com"], "headers": {"X-Key": SECRET}}, "malformed"),
        ("c", {"hosts": ["10.0.0.1"], "headers": {"X-Key": SECRET}}, "address"),
        ("c", {"hosts": ["a.example.com"], "headers": {"Host": SECRET}}, "not allowed"),
        ("c", {"hosts": ["a.example.com"], "headers": {"X-Key": SECRET + "\r\nX: y"}}, "printable"),
        ("c", {"hosts": ["a.example.com"]}, "exactly one"),
        ("c", [SECRET], "JSON object"),
    ],
)
async def test_bad_credentials_are_400_and_never_echo_the_value(
    jp_fetch: Fetch, name: str, body: Any, says: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    status, error = await credentials(jp_fetch, "PUT", name, body=body)
    assert (status, error["code"]) == (400, "invalid_request"), error
    assert says in error["message"]
    assert SECRET not in error["message"]
    assert SECRET not in caplog.text
    assert await credentials(jp_fetch, "GET") == (200, {"credentials": []})


def test_the_store_is_outside_the_state_directory(
    extension: SandboxExtension, state_dir: Path
) -> None:
    root = extension.manager.network.credentials_path
    assert state_dir not in root.parents
    assert extension.manager.network.proxy_options()["credentials_dir"] == str(root)
