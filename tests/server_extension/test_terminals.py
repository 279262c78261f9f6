"""GET /api/sandboxes/{id}/terminal, a WebSocket speaking terminado's protocol, against a real
server and a real engine. Error answers (before the upgrade) are checked against openapi.yaml
by ``api``; the shell itself is tested on both runtimes in tests/sandbox/operations/test_terminals.py."""

from __future__ import annotations

import asyncio
import base64
import gc
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError
from tornado.websocket import WebSocketClientConnection

from jupyter_sandbox.protocol.errors import InvalidRequestError
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.server_extension import SandboxExtension
from jupyter_sandbox.server_extension.terminal_handlers import (
    MAX_CLIENT_MESSAGE,
    SandboxTerminalHandler,
    client_message,
)
from tests.conftest import manager_config
from tests.server_extension.conftest import Fetch, api
from tests.server_extension.test_auth_and_spec import with_named_users
from tests.server_extension.test_commands import processes
from tests.server_extension.test_snapshots import ALICE, BOB

pytestmark = pytest.mark.integration
WsFetch = Callable[..., Awaitable[WebSocketClientConnection]]
# What a WebSocket client sends to ask for the upgrade: with it, an error before the upgrade is
# an ordinary answer that a plain HTTP request can read.
UPGRADE = {
    "Upgrade": "websocket",
    "Connection": "Upgrade",
    "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(),
}


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    return with_named_users(jp_server_config)


async def sandbox(fetch: Fetch, runtime: str = "runc") -> str:
    status, made = await api(fetch, "POST", body={"runtime": runtime}, **ALICE)
    assert status == 201, made
    return str(made["id"])


async def connect(ws_fetch: WsFetch, sandbox_id: str, **params: Any) -> WebSocketClientConnection:
    return await ws_fetch(
        "api", "sandboxes", sandbox_id, "terminal", params=params, headers=dict(ALICE["headers"])
    )


async def handshake(
    fetch: Fetch, sandbox_id: str, who: dict[str, Any] = ALICE, **params: Any
) -> tuple[int, Any]:
    """What a WebSocket client asking for a terminal is answered, when it is not the upgrade."""
    headers = {**who["headers"], **UPGRADE}
    return await api(fetch, "GET", sandbox_id, "terminal", params=params, headers=headers)


async def receive(ws: WebSocketClientConnection, timeout: float = 30) -> Any:
    """The next message, decoded; None once the server closed the WebSocket."""
    message = await asyncio.wait_for(ws.read_message(), timeout)
    return None if message is None else json.loads(message)


async def run(ws: WebSocketClientConnection, line: str, seen: list[Any] | None = None) -> str:
    """Type ``line`` and Enter; what it printed, framed by markers the shell computes (so that
    the echo of the typed line is never taken for its output). ``seen`` collects every
    message that came meanwhile."""
    token = uuid.uuid4().hex[:8]
    ws.write_message(
        json.dumps(["stdin", f"echo B{token}-$((6*7)); {line}; echo E{token}-$((6*7))\r"])
    )
    text = ""
    while f"E{token}-42" not in text:
        message = await receive(ws)
        assert message is not None, text
        assert message[0] == "stdout", (message, text)
        if seen is not None:
            seen.append(message)
        text += message[1]
    return text.split(f"B{token}-42\r\n", 1)[1].rsplit(f"E{token}-42", 1)[0]


async def until_closed(extension: SandboxExtension, sandbox_id: str) -> None:
    """Wait (at most 10 s) until the server holds no terminal of the sandbox."""
    for _ in range(100):
        if extension.manager.terminals.open_count(sandbox_id) == 0:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"terminals of {sandbox_id} still open")


async def test_a_terminal_speaks_terminados_protocol(
    jp_fetch: Fetch,
    jp_ws_fetch: WsFetch,
    extension: SandboxExtension,
    caplog: pytest.LogCaptureFixture,
) -> None:
    sandbox_id = await sandbox(jp_fetch)
    ws = await connect(jp_ws_fetch, sandbox_id, rows=30, cols=100)
    assert await receive(ws) == ["setup", {}]
    [handler] = [o for o in gc.get_objects() if isinstance(o, SandboxTerminalHandler)]
    assert handler.ws_connection is not None
    server_end = handler.ws_connection.stream.socket  # type: ignore[attr-defined]
    assert server_end.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)  # echoes sent at once
    assert (await run(ws, "stty size; id -u; pwd")).split() == ["30", "100", "10001", "/workspace"]

    # JupyterLab's set_size carries pixel sizes after rows and cols: ignored.
    ws.write_message(json.dumps(["set_size", 40, 120, 640, 960]))
    assert (await run(ws, "stty size")).split() == ["40", "120"]

    # Malformed messages are ignored, each with a warning that does not hold it; the terminal
    # goes on as before.
    caplog.set_level(logging.INFO)
    secret = f"typed-{uuid.uuid4().hex}"
    malformed = [
        "not json",
        json.dumps({"stdin": secret}),
        "[]",
        json.dumps([secret, "x"]),
        json.dumps(["stdin", 5]),
        json.dumps(["stdin", secret, "more"]),
        json.dumps(["set_size", 10]),
        json.dumps(["set_size", "40", "120"]),
        json.dumps(["set_size", 0, 120]),
        json.dumps(["set_size", 40, 1001]),
        json.dumps(["set_size", True, 12]),
        json.dumps(["set_size", secret, 12]),
    ]
    for message in malformed:
        ws.write_message(message)
    ws.write_message(b"\xff\x00", binary=True)
    assert (await run(ws, "stty size")).split() == ["40", "120"]  # no bad size applied
    warnings = [r for r in caplog.records if "ignored a malformed message" in r.getMessage()]
    assert len(warnings) == len(malformed) + 1, [r.getMessage() for r in warnings]
    assert (await run(ws, f"echo {secret} | rev")).strip() == secret[::-1]
    assert secret not in caplog.text  # neither malformed nor typed input is logged

    # UTF-8 split between two writes arrives whole; undecodable bytes are replaced; no
    # message is empty.
    seen: list[Any] = []
    said = await run(ws, "printf '\\303'; sleep 0.3; printf '\\251|\\377|\\n'", seen)
    assert said == "é|\ufffd|\r\n"
    assert all(isinstance(m[1], str) and m[1] for m in seen), seen

    ws.write_message(json.dumps(["stdin", "exit\r"]))
    while (message := await receive(ws)) != ["disconnect", 1]:
        assert message is not None
        assert message[0] == "stdout", message
    assert await receive(ws) is None  # then the server closes the WebSocket
    await until_closed(extension, sandbox_id)


@pytest.mark.parametrize("runtime", ["runc", pytest.param("runsc", marks=pytest.mark.runsc)])
async def test_closing_the_websocket_kills_the_shell_and_what_it_started(
    jp_fetch: Fetch, jp_ws_fetch: WsFetch, extension: SandboxExtension, runtime: str
) -> None:
    sandbox_id = await sandbox(jp_fetch, runtime)
    ws = await connect(jp_ws_fetch, sandbox_id)
    assert await receive(ws) == ["setup", {}]
    await run(ws, "sleep 1006 & nohup sleep 1007 >/dev/null 2>&1 & true")
    for _ in range(50):
        found = await processes(jp_fetch, sandbox_id)
        if {"sleep 1006", "sleep 1007"} <= set(found):
            break
        await asyncio.sleep(0.1)
    assert {"sleep 1006", "sleep 1007", "/bin/bash -i"} <= set(found), found

    ws.close()
    left = time.monotonic()
    while time.monotonic() - left < 10:
        found = await processes(jp_fetch, sandbox_id)
        if not [line for line in found if "sleep 100" in line or "bash -i" in line]:
            break
        await asyncio.sleep(0.2)
    assert not [line for line in found if "sleep 100" in line or "bash -i" in line], found
    await until_closed(extension, sandbox_id)


async def test_what_fails_before_the_shell_is_an_ordinary_error_answer(
    jp_fetch: Fetch,
    jp_ws_fetch: WsFetch,
    extension: SandboxExtension,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    status, error = await handshake(jp_fetch, "0123456789ab")
    assert (status, error["code"]) == (404, "sandbox_not_found"), error
    with pytest.raises(HTTPClientError) as refused:  # as a WebSocket client sees it
        await connect(jp_ws_fetch, "0123456789ab")
    assert refused.value.code == 404

    sandbox_id = await sandbox(jp_fetch)
    status, error = await handshake(jp_fetch, sandbox_id, BOB)
    assert (status, error["code"]) == (404, "sandbox_not_found"), error
    for params, says in [
        ({"rows": "abc"}, "rows must be a whole number of character cells from 1 to 1000"),
        ({"rows": "0"}, "rows must be"),
        ({"cols": "1001"}, "cols must be a whole number"),
        ({"cols": "-5"}, "cols must be"),
        ({"rows": "2.5", "cols": "80"}, "rows must be"),
    ]:
        status, error = await handshake(jp_fetch, sandbox_id, **params)
        assert (status, error["code"]) == (400, "invalid_request"), (params, error)
        assert says in error["message"], error
    status, error = await api(jp_fetch, "GET", sandbox_id, "terminal", **ALICE)  # no upgrade
    assert (status, error["code"]) == (400, "invalid_request"), error
    assert "this route is a WebSocket" in error["message"]

    # No token, a wrong one, or a user the authorizer refuses: 403, nothing opened.
    for token in (None, "token wrong", "token mallory"):
        headers = {} if token is None else {"Authorization": token}
        status, _ = await api(
            jp_fetch, "GET", sandbox_id, "terminal", headers={**headers, **UPGRADE}
        )
        assert status == 403, token
        with pytest.raises(HTTPClientError) as refused:
            await jp_ws_fetch(
                "api", "sandboxes", sandbox_id, "terminal", headers={"Authorization": token or ""}
            )
        assert refused.value.code == 403, token

    # Past the cap: 429 naming the setting, until a terminal closes.
    monkeypatch.setattr(extension.manager.terminals, "max_per_sandbox", 1)
    ws = await connect(jp_ws_fetch, sandbox_id)
    assert await receive(ws) == ["setup", {}]
    status, error = await handshake(jp_fetch, sandbox_id)
    assert (status, error["code"]) == (429, "too_many_terminals"), error
    assert "c.SandboxTerminals.max_per_sandbox (1)" in error["message"]
    ws.close()
    await until_closed(extension, sandbox_id)

    status, _ = await api(jp_fetch, "POST", sandbox_id, "pause", **ALICE)
    assert status == 200
    status, error = await handshake(jp_fetch, sandbox_id)
    assert (status, error["code"]) == (409, "sandbox_conflict"), error
    assert "is paused: resume it first" in error["message"]
    status, _ = await api(jp_fetch, "POST", sandbox_id, "resume", **ALICE)
    assert status == 200
    found = await processes(jp_fetch, sandbox_id)
    assert not [line for line in found if "bash" in line], found  # no shell was left


async def test_stopping_the_server_closes_its_terminals(
    jp_fetch: Fetch, jp_ws_fetch: WsFetch, extension: SandboxExtension, state_dir: Path
) -> None:
    sandbox_id = await sandbox(jp_fetch)
    ws = await connect(jp_ws_fetch, sandbox_id)
    assert await receive(ws) == ["setup", {}]
    await run(ws, "nohup sleep 1008 >/dev/null 2>&1 & true")
    await extension.stop_extension()  # what the server does when it stops
    while (message := await receive(ws)) != ["disconnect", 1]:
        assert message is not None
        assert message[0] == "stdout", message
    assert await receive(ws) is None
    checker = SandboxManager.from_config(manager_config(state_dir))
    try:
        listed = await checker.exec("alice", sandbox_id, ["sh", "-c", "cat /proc/[0-9]*/cmdline"])
    finally:
        await checker.close()
    assert b"sandbox-init" in listed.stdout  # the listing works
    assert b"sleep\x001008" not in listed.stdout
    assert b"bash\x00-i" not in listed.stdout


@pytest.mark.checklist(
    row=76,
    attack="a terminal client sends frames nested 100,000 deep, past 1 MiB, with NaN, 1e999 or a "
    "repeated key (the fuzz target terminal_client_message replays these and searches further)",
    expected="each refused as a malformed message (logged without its content, ignored); no "
    "RecursionError out of on_message",
)
@pytest.mark.parametrize(
    "frame",
    [
        "[" * 100_000,
        '["stdin", "' + "x" * MAX_CLIENT_MESSAGE + '"]',
        '["set_size", NaN, 80]',
        '["set_size", 24, 1e999]',
        '{"stdin": "typed secret", "stdin": "x"}',
        b'["stdin", "\xff"]',
    ],
)
def test_a_hostile_frame_is_a_malformed_message_that_quotes_nothing(
    frame: str | bytes, observe: Callable[..., None]
) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        client_message(frame)
    assert "secret" not in refused.value.message
    assert "1e999" not in refused.value.message
    observe(f"refused: {refused.value.message}")
