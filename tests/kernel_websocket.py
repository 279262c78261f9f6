"""Run a cell over a kernel's WebSocket, as JupyterLab does through jupyter_server's channels
(tests/kernel/test_jupyter_server.py, and through a JupyterHub's proxy, tests/hub/)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import datetime, timezone
from typing import Any

from tornado.websocket import WebSocketClientConnection


def execute_request(code: str) -> dict[str, Any]:
    """A shell execute_request as JupyterLab sends it over the kernel WebSocket."""
    return {
        "header": {
            "msg_id": uuid.uuid4().hex,
            "msg_type": "execute_request",
            "username": "test",
            "session": uuid.uuid4().hex,
            "date": datetime.now(timezone.utc).isoformat(),
            "version": "5.3",
        },
        "parent_header": {},
        "metadata": {},
        "content": {
            "code": code,
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": True,
        },
        "buffers": [],
        "channel": "shell",
    }


async def run_cell(
    connection: WebSocketClientConnection, code: str, timeout: float
) -> tuple[str, dict[str, Any]]:
    """Send ``code``; (what it printed, its execute_reply's content), once the kernel is idle
    again, within ``timeout`` seconds."""
    request = execute_request(code)
    msg_id = request["header"]["msg_id"]
    await connection.write_message(json.dumps(request))
    stdout: list[str] = []
    reply: dict[str, Any] | None = None
    idle = False
    deadline = time.monotonic() + timeout
    while reply is None or not idle:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"no execute_reply and idle in {timeout:g}s; stdout {stdout}")
        raw = await asyncio.wait_for(connection.read_message(), timeout=remaining)
        assert raw is not None, "the kernel WebSocket closed"
        message = json.loads(raw)
        if message.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        kind = message["header"]["msg_type"]
        if message["channel"] == "iopub" and kind == "stream":
            stdout.append(message["content"]["text"])
        elif message["channel"] == "iopub" and kind == "status":
            idle = message["content"]["execution_state"] == "idle"
        elif message["channel"] == "shell" and kind == "execute_reply":
            reply = message["content"]
    return "".join(stdout), reply
