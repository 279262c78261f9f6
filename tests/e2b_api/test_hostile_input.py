"""Hostile requests to the E2B API, sent as raw HTTP (no SDK smooths them), on both runtimes:
forged and misplaced credentials, malformed Connect envelopes, users and programs the sandbox
must not take. Each is refused with E2B's error form before anything runs, and the sandbox it
aimed at still answers."""

from __future__ import annotations

import asyncio
import base64
import json
import struct
from collections.abc import Callable
from typing import Any

import pytest
from e2b import InvalidArgumentException
from e2b_code_interpreter import Sandbox
from tornado.httpclient import AsyncHTTPClient, HTTPResponse

from tests.e2b_api.conftest import e2b_server_config

pytestmark = pytest.mark.integration
START = "process.Process/Start"


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any], runtime: str) -> dict[str, Any]:
    return e2b_server_config(jp_server_config, runtime)


async def send(
    url: str, *, method: str = "POST", body: bytes | None = None, **headers: str
) -> HTTPResponse:
    response: HTTPResponse = await AsyncHTTPClient().fetch(
        url,
        method=method,
        body=body if body is not None or method != "POST" else b"",
        headers={name.replace("_", "-"): value for name, value in headers.items()},
        raise_error=False,
        request_timeout=60,
    )
    return response


def envelope(message: bytes, flags: int = 0, length: int | None = None) -> bytes:
    return struct.pack(">BI", flags, len(message) if length is None else length) + message


async def create(api_url: str, key: str) -> dict[str, Any]:
    response = await send(f"{api_url}/v2/sandboxes", body=b'{"templateID": "base"}', X_API_KEY=key)
    assert response.code == 201, response.body
    made: dict[str, Any] = json.loads(response.body)
    return made


async def command(api_url: str, made: dict[str, Any], script: str, **extra: str) -> HTTPResponse:
    message = json.dumps({"process": {"cmd": "/bin/sh", "args": ["-c", script]}}).encode()
    headers = {
        "Content_Type": "application/connect+json",
        "E2b_Sandbox_Id": made["sandboxID"],
        "X_Access_Token": made["envdAccessToken"],
        **extra,
    }
    return await send(f"{api_url}/sandbox/{START}", body=envelope(message), **headers)


def frames(body: bytes) -> list[tuple[int, dict[str, Any]]]:
    found, at = [], 0
    while at < len(body):
        flags, length = struct.unpack_from(">BI", body, at)
        found.append((flags, json.loads(body[at + 5 : at + 5 + length])))
        at += 5 + length
    return found


@pytest.mark.checklist(
    row=80,
    attack="data-plane requests to alice's sandbox with no X-Access-Token, a forged one, bob's "
    "token for his own sandbox, alice's token for her other sandbox, and 60 kB of garbage",
    expected="each refused 401 (E2B's AuthenticationException) before anything runs; alice's "
    "sandbox answers its own token",
)
async def test_only_the_sandboxs_own_token_reaches_it(
    e2b_env: str, observe: Callable[..., None]
) -> None:
    alice, alice_other = await create(e2b_env, "e2b_alice"), await create(e2b_env, "e2b_alice")
    bob = await create(e2b_env, "e2b_bob")
    owner_part = alice["envdAccessToken"].split(".")[0]
    forged = f"{owner_part}.{base64.urlsafe_b64encode(bytes(24)).decode()}"
    attempts = {
        "none": None,
        "forged": forged,
        "bob's": bob["envdAccessToken"],
        "other sandbox's": alice_other["envdAccessToken"],
        "garbage": "x" * 60_000,  # under tornado's 64 KiB of headers: it reaches us
    }
    for name, token in attempts.items():
        headers = {"E2b_Sandbox_Id": alice["sandboxID"]}
        if token is not None:
            headers["X_Access_Token"] = token
        response = await send(f"{e2b_env}/sandbox/health", method="GET", **headers)
        assert response.code == 401, (name, response.code, response.body)
        ran = await command(
            e2b_env, {**alice, "envdAccessToken": token or ""}, "touch /workspace/ran"
        )
        assert ran.code == 401, (name, ran.code)
        assert json.loads(ran.body)["code"] == "unauthenticated"
    assert (
        await send(
            f"{e2b_env}/sandbox/health",
            method="GET",
            E2b_Sandbox_Id=alice["sandboxID"],
            X_Access_Token=alice["envdAccessToken"],
        )
    ).code == 204
    listing = await command(e2b_env, alice, "ls /workspace")
    assert b"cmFu" not in listing.body  # base64 of "ran": no refused request ran its command
    observe(
        f"{len(attempts)} credentials refused 401 on /health and Process/Start",
        cases=2 * len(attempts),
    )


@pytest.mark.checklist(
    row=81,
    attack="Process/Start with hostile Connect framing: a length of 4 GiB, a compressed flag, "
    "two envelopes, a truncated header, non-JSON, a JSON array, an unknown field, JSON nested "
    "past the interpreter's stack, a field given twice, binary protobuf, and a 2 MiB message",
    expected="each refused invalid_argument from its first bytes (the declared length is never "
    "allocated); no command runs",
)
async def test_malformed_connect_envelopes_are_refused(
    e2b_env: str, observe: Callable[..., None]
) -> None:
    made = await create(e2b_env, "e2b_alice")
    good = json.dumps({"process": {"cmd": "/bin/sh", "args": ["-c", "touch /workspace/ran"]}})
    bodies = {
        "4 GiB length": envelope(good.encode(), length=2**32 - 1),
        "compressed": envelope(good.encode(), flags=1),
        "two envelopes": envelope(good.encode()) * 2,
        "truncated": b"\x00\x00",
        "not JSON": envelope(b"\xff{"),
        "array": envelope(b"[1, 2]"),
        "unknown field": envelope(json.dumps({**json.loads(good), "evil": 1}).encode()),
        "nested too deeply": envelope(b"[" * 100_000),
        # json.loads kept the last of the two: the command that touches the file
        "a field twice": envelope(
            f'{{"process": {{"cmd": "/bin/true"}}, "process": {good[12:-1]}}}'.encode()
        ),
        "too large": envelope(b" " * (2 * 1024**2)),
    }
    headers = {
        "E2b_Sandbox_Id": made["sandboxID"],
        "X_Access_Token": made["envdAccessToken"],
    }
    for name, body in bodies.items():
        response = await send(
            f"{e2b_env}/sandbox/{START}",
            body=body,
            Content_Type="application/connect+json",
            **headers,
        )
        assert response.code == 400, (name, response.code, response.body[:200])
        assert json.loads(response.body)["code"] == "invalid_argument", name
    binary = await send(
        f"{e2b_env}/sandbox/{START}", body=b"\x0a\x05", Content_Type="application/proto", **headers
    )
    assert binary.code == 400
    check = await command(e2b_env, made, "test -e /workspace/ran; echo $?")
    assert base64.b64decode(frames(check.body)[1][1]["event"]["data"]["stdout"]) == b"1\n"
    observe(
        f"{len(bodies) + 1} malformed Start requests refused invalid_argument",
        cases=len(bodies) + 1,
    )


@pytest.mark.checklist(
    row=82,
    attack="E2B calls as user root: commands.run(user='root'), files.read/write(user='root'), "
    "and an Authorization header that is not Basic",
    expected="each refused with E2B's InvalidArgumentException naming the one user; nothing "
    "runs as another user",
)
async def test_another_user_is_refused(e2b_env: str, observe: Callable[..., None]) -> None:
    def scenario() -> None:
        sandbox = Sandbox.create()
        try:
            with pytest.raises(InvalidArgumentException, match="user 'root' is not available"):
                sandbox.commands.run("id -u", user="root")
            with pytest.raises(InvalidArgumentException, match="root"):
                sandbox.files.write("a.txt", "x", user="root")
            with pytest.raises(InvalidArgumentException, match="root"):
                sandbox.files.read("a.txt", user="root")
            assert sandbox.commands.run("id -u", user="user").stdout.strip() != "0"
        finally:
            sandbox.kill()

    await asyncio.to_thread(scenario)
    made = await create(e2b_env, "e2b_alice")
    response = await command(e2b_env, made, "id", Authorization="Bearer root")
    assert response.code == 400
    observe("user root refused on commands and files; a Bearer header refused", cases=4)


@pytest.mark.checklist(
    row=83,
    attack="control-plane requests carrying alice's valid Jupyter token in Authorization but no "
    "X-API-KEY, a key that is not e2b_, and an e2b_ key of no user",
    expected="each refused 401 in E2B's error form: only the key authenticates, and the "
    "Authorization header sent is replaced by it",
)
async def test_only_the_api_key_authenticates_the_control_plane(
    e2b_env: str, observe: Callable[..., None]
) -> None:
    cases = {
        "no key": {"Authorization": "token alice"},
        "not e2b_": {"Authorization": "token alice", "X_API_KEY": "alice"},
        "no user": {"Authorization": "token alice", "X_API_KEY": "e2b_nobody"},
    }
    for name, headers in cases.items():
        response = await send(f"{e2b_env}/v2/sandboxes", body=b"{}", **headers)
        assert response.code == 401, (name, response.code)
        assert json.loads(response.body)["code"] == 401
        listing = await send(f"{e2b_env}/v2/sandboxes", method="GET", **headers)
        assert listing.code == 401, name
    observe("3 credentials refused 401 on create and list", cases=6)


@pytest.mark.checklist(
    row=84,
    attack="Process/Start naming its program by a name the sandbox's PATH would resolve "
    "('sh'), a PTY running another program than the sandbox's shell, and a multipart upload "
    "of 101 files",
    expected="refused before anything runs or is written: the program must be an absolute "
    "path, a PTY runs only the shell, and a 101-part upload is named as too many",
)
async def test_programs_by_path_and_oversized_uploads_are_refused(
    e2b_env: str, observe: Callable[..., None]
) -> None:
    made = await create(e2b_env, "e2b_alice")
    headers = {"E2b_Sandbox_Id": made["sandboxID"], "X_Access_Token": made["envdAccessToken"]}
    by_name = json.dumps({"process": {"cmd": "sh", "args": ["-c", "touch /workspace/ran"]}})
    response = await send(
        f"{e2b_env}/sandbox/{START}",
        body=envelope(by_name.encode()),
        Content_Type="application/connect+json",
        **headers,
    )
    assert response.code == 400
    assert b"absolute path" in response.body
    pty = json.dumps({"process": {"cmd": "/bin/sh"}, "pty": {"size": {"cols": 80, "rows": 24}}})
    response = await send(
        f"{e2b_env}/sandbox/{START}",
        body=envelope(pty.encode()),
        Content_Type="application/connect+json",
        **headers,
    )
    assert response.code == 400
    assert b"PTY" in response.body
    boundary = "b0undary"
    parts = b"".join(
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="f{i}"\r\n\r\nx\r\n'.encode()
        for i in range(101)
    )
    response = await send(
        f"{e2b_env}/sandbox/files",
        body=parts + f"--{boundary}--\r\n".encode(),
        Content_Type=f"multipart/form-data; boundary={boundary}",
        **headers,
    )
    assert response.code == 400
    assert b"too many parts" in response.body
    check = await command(e2b_env, made, "ls /workspace | wc -l")
    assert base64.b64decode(frames(check.body)[1][1]["event"]["data"]["stdout"]) == b"0\n"
    observe("PATH name, PTY and 101-part upload refused 400; the workspace is empty", cases=3)
