"""Run a cell over a kernel's WebSocket, as JupyterLab does through jupyter_server's channels
(tests/kernel/test_jupyter_server.py, and through a JupyterHub's proxy, tests/hub/)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import datetime, timezone
from typing import Any

from jupyter_server.services.kernels.connection.base import (
    deserialize_binary_message,
    deserialize_msg_from_ws_v1,
    serialize_msg_to_ws_v1,
)
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


KERNEL_V1 = "v1.kernel.websocket.jupyter.org"  # JupyterLab's protocol; none is the legacy one


def encode(connection: WebSocketClientConnection, message: dict[str, Any]) -> str | bytes:
    """``message`` (with its ``channel``) in the protocol the server chose for ``connection``."""
    if connection.selected_subprotocol != KERNEL_V1:
        return json.dumps(message)
    parts = [
        json.dumps(message[part]).encode()
        for part in ("header", "parent_header", "metadata", "content")
    ]
    parts += message["buffers"]
    return bytes(serialize_msg_to_ws_v1(parts, message["channel"]))  # type: ignore[no-untyped-call]


def decode(connection: WebSocketClientConnection, raw: str | bytes) -> dict[str, Any]:
    """A message from ``connection`` as a dict: channel, header, parent_header, metadata,
    content, and buffers (bytes), whichever protocol and frame type carried it."""
    if connection.selected_subprotocol == KERNEL_V1:
        assert isinstance(raw, bytes), "a v1 message in a text frame"
        channel, parts = deserialize_msg_from_ws_v1(raw)  # type: ignore[no-untyped-call]
        header, parent, metadata, content = (json.loads(part) for part in parts[:4])
        return {
            "channel": channel,
            "header": header,
            "parent_header": parent,
            "metadata": metadata,
            "content": content,
            "buffers": [bytes(buffer) for buffer in parts[4:]],
        }
    if isinstance(raw, bytes):  # the legacy protocol's binary form: a message with buffers
        message: dict[str, Any] = deserialize_binary_message(raw)  # type: ignore[no-untyped-call]
        message["buffers"] = [bytes(buffer) for buffer in message["buffers"]]
        return message
    decoded: dict[str, Any] = json.loads(raw)
    decoded.setdefault("buffers", [])
    return decoded


async def cell_messages(
    connection: WebSocketClientConnection, code: str, timeout: float
) -> list[dict[str, Any]]:
    """Send ``code``; every message whose parent is its request (decoded), until both its
    execute_reply and its idle status came, within ``timeout`` seconds."""
    request = execute_request(code)
    msg_id = request["header"]["msg_id"]
    await connection.write_message(
        encode(connection, request), binary=connection.selected_subprotocol == KERNEL_V1
    )
    messages: list[dict[str, Any]] = []
    replied = idle = False
    deadline = time.monotonic() + timeout
    while not (replied and idle):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"no execute_reply and idle in {timeout:g}s; got {messages}")
        raw = await asyncio.wait_for(connection.read_message(), timeout=remaining)
        assert raw is not None, f"the kernel WebSocket closed ({connection.close_code})"
        message = decode(connection, raw)
        if message.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        messages.append(message)
        kind = message["header"]["msg_type"]
        if message["channel"] == "iopub" and kind == "status":
            idle = message["content"]["execution_state"] == "idle"
        elif message["channel"] == "shell" and kind == "execute_reply":
            replied = True
    return messages


async def run_cell(
    connection: WebSocketClientConnection, code: str, timeout: float
) -> tuple[str, dict[str, Any]]:
    """Send ``code``; (what it printed, its execute_reply's content), once the kernel is idle
    again, within ``timeout`` seconds."""
    messages = await cell_messages(connection, code, timeout)
    stdout = "".join(
        m["content"]["text"]
        for m in messages
        if m["channel"] == "iopub" and m["header"]["msg_type"] == "stream"
    )
    (reply,) = (m["content"] for m in messages if m["header"]["msg_type"] == "execute_reply")
    return stdout, reply
