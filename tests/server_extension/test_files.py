"""/api/sandboxes/{id}/files and its content, against a real server and a real engine."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_sandbox.server_extension import SandboxExtension
from tests.server_extension.conftest import Fetch, api
from tests.server_extension.openapi_check import check_response
from tests.server_extension.test_snapshots import ALICE, BOB, TwoUsers

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


async def test_make_a_directory_look_up_and_move(jp_fetch: Fetch) -> None:
    status, made = await api(jp_fetch, "POST", body={}, **ALICE)
    assert status == 201, made
    sandbox_id = made["id"]

    async def files(method: str, path: str, body: Any = None, *rest: str) -> tuple[int, Any]:
        return await api(
            jp_fetch, method, sandbox_id, "files", *rest, body=body, params={"path": path}, **ALICE
        )

    directory = {"type": "directory"}
    status, entry = await files("PUT", "out/raw", directory)
    assert (status, entry["path"], entry["type"], entry["created"]) == (
        201,
        "/workspace/out/raw",
        "directory",
        True,
    )
    assert (await files("PUT", "out/raw", directory))[0] == 200  # already there: fine
    for body in ("not json", [1], {}, {"type": "file"}):
        status, error = await files("PUT", "out", body)
        assert (status, error["code"]) == (400, "invalid_request"), error
    assert '{"type": "directory"}' in error["message"]

    await files("PUT", "out/raw/a.csv", b"a,b\n", "content")
    status, entry = await files("GET", "out/raw/a.csv", None, "info")
    assert (status, entry["type"], entry["size"]) == (200, "file", 4)
    status, error = await files("GET", "out/none.csv", None, "info")
    assert (status, error["code"]) == (404, "file_not_found")
    status, error = await files("PUT", "out/raw/a.csv", directory)  # a file is there
    assert (status, error["code"]) == (409, "file_exists")

    status, entry = await files("PATCH", "out/raw/a.csv", {"path": "final/a.csv"})
    assert (status, entry["path"]) == (200, "/workspace/final/a.csv")
    await files("PUT", "out/b.csv", b"b", "content")
    status, error = await files("PATCH", "out/b.csv", {"path": "final/a.csv"})
    assert (status, error["code"]) == (409, "file_exists")
    assert "overwrite" in error["message"]
    status, entry = await files("PATCH", "out/b.csv", {"path": "final/a.csv", "overwrite": True})
    assert (status, entry["size"]) == (200, 1)
    for body in ({}, {"path": 3}, {"path": "x", "overwrite": "yes"}, {"path": "x", "to": "y"}):
        status, error = await files("PATCH", "final/a.csv", body)
        assert (status, error["code"]) == (400, "invalid_request"), body
    assert "overwrite" in error["message"]

    # Another user's sandbox is not found, whatever the operation.
    for method, rest, body in (("PUT", (), directory), ("PATCH", (), {"path": "x"})):
        status, _ = await api(
            jp_fetch, method, sandbox_id, "files", *rest, body=body, params={"path": "y"}, **BOB
        )
        assert status == 404
    status, _ = await api(
        jp_fetch, "GET", sandbox_id, "files", "info", params={"path": "final"}, **BOB
    )
    assert status == 404


async def test_the_path_is_taken_exactly_as_sent(jp_fetch: Fetch) -> None:
    """A name may begin with a space, or hold one at its end: the query argument is not
    stripped (as tornado's get_query_argument would, naming another file); given twice, it
    is refused rather than one of them picked."""
    status, made = await api(jp_fetch, "POST", body={}, **ALICE)
    assert status == 201, made
    sandbox_id = made["id"]
    status, entry = await api(
        jp_fetch,
        "PUT",
        sandbox_id,
        "files",
        "content",
        body=b"spaced",
        params={"path": " name "},
        **ALICE,
    )
    assert (status, entry["path"]) == (200, "/workspace/ name "), entry
    # Its bytes, as application/octet-stream (APIHandler's finish made every answer JSON).
    assert await content(jp_fetch, sandbox_id, " name ", **ALICE) == (200, b"spaced")
    status, error = await content(jp_fetch, sandbox_id, "name", **ALICE)
    assert (status, error["code"]) == (404, "file_not_found")
    status, error = await api(
        jp_fetch,
        "GET",
        sandbox_id,
        "files",
        "info",
        params=[("path", " name "), ("path", "other")],
        **ALICE,
    )
    assert (status, error["code"]) == (400, "invalid_request"), error
    assert "given 2 times" in error["message"]


async def test_a_download_past_the_cap_is_refused_before_its_first_byte_or_cut_short(
    jp_fetch: Fetch, server_url: str, extension: SandboxExtension
) -> None:
    """Downloads are streamed: a file larger than SandboxFiles.max_bytes is still an ordinary
    413 (the program in the sandbox looks at its size before sending any of it), and one that
    passes the cap only as it is read (a /proc file says its size is 0) is cut short, its
    answer never ended as a complete one."""
    status, made = await api(jp_fetch, "POST", body={}, **ALICE)
    assert status == 201, made
    sandbox_id = made["id"]
    files = extension.manager.files
    files.max_bytes = 1024
    status, entry = await api(
        jp_fetch,
        "PUT",
        sandbox_id,
        "files",
        "content",
        body=b"x" * 1024,
        params={"path": "full.bin"},
        **ALICE,
    )
    assert status == 200, entry
    directory = {"type": "directory"}
    await api(jp_fetch, "PUT", sandbox_id, "files", body=directory, params={"path": "d"}, **ALICE)
    empty = {"body": b"", "params": {"path": "e"}}
    assert (await api(jp_fetch, "PUT", sandbox_id, "files", "content", **empty, **ALICE))[0] == 200
    assert await content(jp_fetch, sandbox_id, "full.bin", **ALICE) == (200, b"x" * 1024)
    assert await content(jp_fetch, sandbox_id, "e", **ALICE) == (200, b"")
    status, error = await content(jp_fetch, sandbox_id, "d", **ALICE)
    assert (status, error["code"]) == (409, "file_type"), error

    files.max_bytes = 1023
    status, error = await content(jp_fetch, sandbox_id, "full.bin", **ALICE)
    assert (status, error["code"]) == (413, "file_too_large"), error
    assert "SandboxFiles.max_bytes" in error["message"]

    # /proc/self/pagemap says its size is 0, and holds far more than the cap: the first of
    # its pieces is sent (a frame of the engine's stream, at most 32 KiB), the rest is not.
    files.max_bytes = 64 * 1024
    url = urlsplit(server_url)
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    try:
        writer.write(
            f"GET {url.path}api/sandboxes/{sandbox_id}/files/content?path=/proc/self/pagemap "
            f"HTTP/1.1\r\nHost: {url.netloc}\r\nAuthorization: token alice\r\n\r\n".encode()
        )
        answer = await asyncio.wait_for(reader.read(), 60)  # to the end: the server closes
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), answer[:300]
    assert b"Transfer-Encoding: chunked" in head, head
    assert not body.endswith(b"0\r\n\r\n"), body  # no end of the chunked body: incomplete
    assert 0 < len(body) < files.max_bytes + 1024, len(body)  # the cap's bytes and chunk sizes
    assert (await api(jp_fetch, "DELETE", sandbox_id, **ALICE))[0] == 204
