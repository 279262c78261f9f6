"""/api/sandboxes/{id}/files and its content, against a real server and a real engine."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from .conftest import Fetch, api
from .openapi_check import check_response
from .test_snapshots import ALICE, BOB, TwoUsers

pytestmark = pytest.mark.integration


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return {
        **jp_server_config,
        "ServerApp": {**jp_server_config["ServerApp"], "identity_provider_class": TwoUsers},
    }


async def content(fetch: Fetch, sandbox_id: str, path: str, **kwargs: Any) -> tuple[int, Any]:
    """GET a file's bytes: (200, bytes), or (status, the JSON error, checked against the spec)."""
    parts = ("api", "sandboxes", sandbox_id, "files", "content")
    try:
        response = await fetch(*parts, params={"path": path}, **kwargs)
    except HTTPClientError as error:
        failed = error.response
        assert failed is not None
        body = json.loads(failed.body)
        check_response("/" + "/".join(parts), "GET", failed.code, body)
        return failed.code, body
    assert response.headers["Content-Type"] == "application/octet-stream"
    return response.code, response.body


async def test_upload_list_download_and_delete(jp_fetch: Fetch) -> None:
    status, made = await api(jp_fetch, "POST", body={}, **ALICE)
    assert status == 201, made
    sandbox_id = made["id"]
    data = os.urandom(256 * 1024)
    status, entry = await api(
        jp_fetch,
        "PUT",
        sandbox_id,
        "files",
        "content",
        body=data,
        params={"path": "results/ü.bin"},
        **ALICE,
    )
    assert status == 200, entry
    assert (entry["path"], entry["size"]) == ("/workspace/results/ü.bin", len(data))

    status, listing = await api(
        jp_fetch, "GET", sandbox_id, "files", params={"path": "results"}, **ALICE
    )
    assert status == 200, listing
    assert [(e["name"], e["type"]) for e in listing["entries"]] == [("ü.bin", "file")]
    status, top = await api(jp_fetch, "GET", sandbox_id, "files", **ALICE)
    assert (status, top["path"], [e["name"] for e in top["entries"]]) == (
        200,
        "/workspace",
        ["results"],
    )

    response = await jp_fetch(
        "api",
        "sandboxes",
        sandbox_id,
        "files",
        "content",
        params={"path": "results/ü.bin"},
        **ALICE,
    )
    assert response.body == data
    assert response.headers["Content-Disposition"] == "attachment; filename*=UTF-8''%C3%BC.bin"

    # Another user's sandbox is not found; a missing file, or a missing path, says so.
    assert (await content(jp_fetch, sandbox_id, "results/ü.bin", **BOB))[0] == 404
    status, error = await content(jp_fetch, sandbox_id, "nothing", **ALICE)
    assert (status, error["code"]) == (404, "file_not_found"), error
    status, error = await api(jp_fetch, "DELETE", sandbox_id, "files", **ALICE)
    assert (status, error["code"]) == (400, "invalid_request"), error
    assert "?path=" in error["message"]

    status, gone = await api(
        jp_fetch, "DELETE", sandbox_id, "files", params={"path": "results"}, **ALICE
    )
    assert (status, gone) == (204, None)
    status, error = await content(jp_fetch, sandbox_id, "results/ü.bin", **ALICE)
    assert (status, error["code"]) == (404, "file_not_found")
