"""Every snapshot route against a real server and a real engine, for two users."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from jupyter_server.auth.identity import IdentityProvider, User
from tornado import web
from tornado.httpclient import HTTPClientError

from jupyter_sandbox.server_extension import SandboxExtension
from tests.sandbox.snapshots.archives import Member, tar_bytes
from tests.server_extension.conftest import Fetch, api

pytestmark = pytest.mark.integration

ALICE = {"headers": {"Authorization": "token alice"}}
BOB = {"headers": {"Authorization": "token bob"}}


class TwoUsers(IdentityProvider):
    """'token alice' is alice, 'token bob' is bob. For tests only."""

    def get_user(self, handler: web.RequestHandler) -> User | None:
        name = handler.request.headers.get("Authorization", "").removeprefix("token ").strip()
        return User(name) if name in ("alice", "bob") else None

    def is_token_authenticated(self, handler: web.RequestHandler) -> bool:
        return True  # API tokens: no XSRF check


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return {
        **jp_server_config,
        "ServerApp": {**jp_server_config["ServerApp"], "identity_provider_class": TwoUsers},
        "Snapshots": {"snapshot_dir": str(tmp_path / "snapshots")},
    }


async def snap(fetch: Fetch, method: str, *path: str, **kwargs: Any) -> tuple[int, Any]:
    return await api(fetch, method, *path, root="snapshots", **kwargs)


async def run(extension: SandboxExtension, sandbox_id: str, script: str) -> str:
    result = await extension.manager.exec("alice", sandbox_id, ["sh", "-c", script])
    assert result.exit_code == 0, result.stderr
    return result.stdout.decode()


async def test_snapshot_routes(
    jp_fetch: Fetch, jp_base_url: str, extension: SandboxExtension
) -> None:
    status, made = await api(jp_fetch, "POST", body={}, **ALICE)
    assert status == 201, made
    source = made["id"]
    await run(extension, source, "mkdir /workspace/d && echo 'héllo' > /workspace/d/f.txt")

    response = await jp_fetch(
        "api", "sandboxes", source, "snapshots", method="POST", body='{"note": "first"}', **ALICE
    )
    assert response.code == 201
    snapshot = json.loads(response.body)
    snapshot_id = snapshot["id"]
    assert response.headers["Location"] == f"{jp_base_url}api/snapshots/{snapshot_id}"
    assert snapshot["note"] == "first"
    assert snapshot["source"]["sandbox"] == source
    assert await snap(jp_fetch, "GET", **ALICE) == (200, [snapshot])
    assert await snap(jp_fetch, "GET", snapshot_id, **ALICE) == (200, snapshot)

    # Another user: the snapshot does not exist, nor does the sandbox.
    assert await snap(jp_fetch, "GET", **BOB) == (200, [])
    for method, path, body in [
        ("GET", [snapshot_id], None),
        ("GET", [snapshot_id, "download"], None),
        ("POST", [snapshot_id, "restore"], {"sandbox": source}),
        ("DELETE", [snapshot_id], None),
    ]:
        status, error = await snap(jp_fetch, method, *path, body=body, **BOB)
        assert (status, error["code"]) == (404, "snapshot_not_found"), (method, path)
    status, error = await api(jp_fetch, "POST", source, "snapshots", body={}, **BOB)
    assert (status, error["code"]) == (404, "sandbox_not_found")
    status, error = await api(jp_fetch, "POST", body={"snapshot": snapshot_id}, **BOB)
    assert (status, error["code"]) == (404, "snapshot_not_found")
    status, error = await snap(jp_fetch, "GET", "..%2F..%2F" + snapshot_id, **ALICE)
    assert (status, error["code"]) == (404, "snapshot_not_found")

    # The download is the stored archive.
    download = await jp_fetch("api", "snapshots", snapshot_id, "download", **ALICE)
    assert download.headers["Content-Type"] == "application/x-tar"
    assert hashlib.sha256(download.body).hexdigest() == snapshot["sha256"]

    # A new sandbox from the snapshot.
    status, restored = await api(jp_fetch, "POST", body={"snapshot": snapshot_id}, **ALICE)
    assert status == 201, restored
    assert await run(extension, restored["id"], "cat /workspace/d/f.txt") == "héllo\n"

    # Restore into the same sandbox.
    await run(extension, source, "rm -r /workspace/d")
    status, result = await snap(
        jp_fetch, "POST", snapshot_id, "restore", body={"sandbox": source}, **ALICE
    )
    assert status == 200, result
    assert await run(extension, source, "cat /workspace/d/f.txt") == "héllo\n"

    # A memory snapshot is refused, and says why.
    status, error = await api(
        jp_fetch, "POST", source, "snapshots", body={"kind": "memory"}, **ALICE
    )
    assert (status, error["code"]) == (409, "memory_snapshot_refused")  # a runc sandbox
    assert "/workspace" in error["message"]

    status, _ = await snap(jp_fetch, "DELETE", snapshot_id, **ALICE)
    assert status == 204
    status, error = await snap(jp_fetch, "GET", snapshot_id, **ALICE)
    assert (status, error["code"]) == (404, "snapshot_not_found")


async def test_import_checks_the_archive(jp_fetch: Fetch) -> None:
    good = tar_bytes(Member("a/b.txt", data=b"b"), Member("a/link", "symlink", target="b.txt"))
    status, imported = await snap(jp_fetch, "POST", body=good, **ALICE)
    assert status == 201, imported
    assert imported["source"] == {"sandbox": None, "image": None, "runtime": None}
    assert imported["sha256"] == hashlib.sha256(good).hexdigest()

    bad = tar_bytes(Member("ok.txt", data=b"x"), Member("../escape.txt", data=b"x"))
    status, error = await snap(jp_fetch, "POST", body=bad, **ALICE)
    assert (status, error["code"]) == (400, "unsafe_archive")
    assert "'../escape.txt'" in error["message"]
    assert "parent-traversal" in error["message"]
    assert (error["member"], error["rule"]) == ("../escape.txt", "parent-traversal")
    status, listed = await snap(jp_fetch, "GET", **ALICE)
    assert [s["id"] for s in listed] == [imported["id"]]

    # gzip only when asked for, and then the plain tar it holds is what is kept
    compressed = tar_bytes(Member("z.txt", data=b"z" * 1000), compression="gz")
    status, error = await snap(jp_fetch, "POST", body=compressed, **ALICE)
    assert (status, error["rule"]) == (400, "compressed"), error
    assert "compression=gzip" in error["message"]
    params = {"note": "gz", "compression": "gzip"}
    status, gz = await snap(jp_fetch, "POST", body=compressed, params=params, **ALICE)
    assert status == 201, gz
    download = await jp_fetch("api", "snapshots", gz["id"], "download", **ALICE)
    assert download.headers["Content-Type"] == "application/x-tar"
    assert download.body == gzip.decompress(compressed)
    assert gz["sha256"] == hashlib.sha256(download.body).hexdigest()
    params = {"compression": "bzip2"}
    status, error = await snap(jp_fetch, "POST", body=compressed, params=params, **ALICE)
    assert (status, error["code"]) == (400, "invalid_request"), error

    with pytest.raises(HTTPClientError) as unauthenticated:
        await jp_fetch("api", "snapshots", method="POST", body=good, headers={"Authorization": "x"})
    assert unauthenticated.value.code == 403
