"""envd's ``/files`` uploads (file_transfer.py, data_plane.py's E2BFilesHandler) sent as raw
HTTP, on both runtimes: an upload's body is read only once its access token was checked, its
declared size is within the cap, and its owner has a turn."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import pytest

from jupyter_sandbox.e2b_api.file_transfer import max_upload_bytes
from jupyter_sandbox.server_extension import SandboxExtension
from tests.e2b_api.conftest import e2b_server_config
from tests.e2b_api.test_hostile_input import command, create, frames, send

pytestmark = pytest.mark.integration
BOUNDARY = "b0undary"


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any], runtime: str) -> dict[str, Any]:
    return e2b_server_config(jp_server_config, runtime)


class RawUpload:
    """The head of an upload to ``/files`` over its own connection, its body not (yet) sent."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(
        cls, api_url: str, made: dict[str, Any], size: int, token: str | None = None
    ) -> RawUpload:
        url = urllib.parse.urlsplit(api_url)
        reader, writer = await asyncio.open_connection(url.hostname, url.port)
        writer.write(
            f"POST {url.path}/sandbox/files?path=up.bin HTTP/1.1\r\nHost: {url.netloc}\r\n"
            f"E2b-Sandbox-Id: {made['sandboxID']}\r\n"
            f"X-Access-Token: {token or made['envdAccessToken']}\r\n"
            f"Content-Type: application/octet-stream\r\nContent-Length: {size}\r\n\r\n".encode()
        )
        await writer.drain()
        return cls(reader, writer)

    async def answer(self, timeout: float) -> tuple[int, dict[str, Any]]:
        """The status and E2B error body the server answered (it then closes)."""
        raw = await asyncio.wait_for(self.reader.read(), timeout)
        head, _, body = raw.partition(b"\r\n\r\n")
        return int(head.split(b" ", 2)[1]), json.loads(body)

    async def close(self) -> None:
        self.writer.close()
        await asyncio.gather(self.writer.wait_closed(), return_exceptions=True)


def multipart(files: dict[str, bytes]) -> bytes:
    return (
        b"".join(
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
            f"Content-Type: application/octet-stream\r\n\r\n".encode()
            + data
            + b"\r\n"
            for name, data in files.items()
        )
        + f"--{BOUNDARY}--\r\n".encode()
    )


@pytest.mark.checklist(
    row=139,
    attack="E2B uploads (POST /files) whose head declares 64 MiB: one with a forged access "
    "token, one past the upload cap (SandboxFiles.max_bytes and the multipart headers); then a "
    "multipart upload of two files with the right token",
    expected="the forged one answered 401 and the oversized one 413 (E2B's error form, naming "
    "the setting) at once, neither body sent nor read; the multipart upload is written",
)
async def test_an_uploads_head_is_refused_before_its_body_is_read(
    e2b_env: str, extension: SandboxExtension, observe: Callable[..., None]
) -> None:
    made = await create(e2b_env, "e2b_alice")
    size = 64 * 1024**2  # under the server's max_body_size: tornado would wait for all of it
    forged = RawUpload.open(e2b_env, made, size, token=made["envdAccessToken"][:-4] + "AAAA")
    upload = await forged
    try:
        status, error = await upload.answer(10)  # no byte of the body was sent
    finally:
        await upload.close()
    assert (status, error["code"]) == (401, 401), error

    files = extension.manager.files
    files.max_bytes = 1024**2
    upload = await RawUpload.open(e2b_env, made, max_upload_bytes(files.max_bytes) + 1)
    try:
        status, error = await upload.answer(10)
    finally:
        await upload.close()
    assert (status, error["code"]) == (413, 413), error
    assert "SandboxFiles.max_bytes" in error["message"], error

    headers = {"E2b_Sandbox_Id": made["sandboxID"], "X_Access_Token": made["envdAccessToken"]}
    response = await send(
        f"{e2b_env}/sandbox/files",
        body=multipart({"/home/user/a.bin": b"\0a", "/home/user/b.bin": b"b" * 1000}),
        Content_Type=f"multipart/form-data; boundary={BOUNDARY}",
        **headers,
    )
    assert response.code == 200, response.body
    assert [entry["name"] for entry in json.loads(response.body)] == ["a.bin", "b.bin"]
    response = await send(f"{e2b_env}/sandbox/files?path=/home/user/b.bin", method="GET", **headers)
    assert (response.code, response.body) == (200, b"b" * 1000)
    ran = await command(e2b_env, made, "ls /workspace")
    assert b"up.bin" not in ran.body  # neither refused upload wrote anything
    observe("forged token 401, oversized head 413, both at once; a 2-file upload written", cases=3)


@pytest.mark.checklist(
    row=140,
    attack="one owner sends more E2B uploads (POST /files) than its share of upload turns, "
    "two of them stalled after their head, a third of 32 MiB",
    expected="the stalled two hold that owner's turns; the third's body is not read (its "
    "sender stalls) until a turn is free, then it is written",
)
async def test_an_e2b_uploads_body_is_read_only_once_its_owner_has_a_turn(
    e2b_env: str, extension: SandboxExtension, observe: Callable[..., None]
) -> None:
    made = await create(e2b_env, "e2b_alice")
    uploads = extension.uploads
    held = [await RawUpload.open(e2b_env, made, 1024) for _ in range(uploads.per_owner)]
    try:
        deadline = time.monotonic() + 30
        while uploads.held.get("alice", 0) < uploads.per_owner:
            assert time.monotonic() < deadline, f"alice's stalled uploads hold {uploads.held}"
            await asyncio.sleep(0.05)
        size = 32 * 1024**2
        third = await RawUpload.open(e2b_env, made, size)
        held.append(third)
        third.writer.write(bytes(size))
        with pytest.raises(TimeoutError):  # the server reads none of it: the sender stalls
            await asyncio.wait_for(third.writer.drain(), 3)
        assert uploads.waiting() == 1
        unsent = third.writer.transport.get_write_buffer_size()
        assert unsent > size // 2, f"only {unsent} of {size} bytes left to send"

        await held[0].close()  # a stalled client leaves: its turn goes to the waiting upload
        await asyncio.wait_for(third.writer.drain(), 60)
        raw = await asyncio.wait_for(third.reader.readuntil(b"]"), 120)
        assert raw.startswith(b"HTTP/1.1 200"), raw[:300]
    finally:
        for upload in held:
            await upload.close()
    ran = await command(e2b_env, made, "stat -c %s /workspace/up.bin")
    assert frames(ran.body)[1][1]["event"]["data"]["stdout"]  # the size, as base64
    observe(
        f"with alice's {uploads.per_owner} turns held by stalled uploads, {unsent} of the 32 MiB "
        "of her third upload stayed unsent for 3 s; once a stalled client left, it was written",
        cases=uploads.per_owner + 1,
    )
