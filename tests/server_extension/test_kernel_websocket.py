"""Kernel WebSockets send each message at once (server_extension/kernel_websocket.py): the
server's end of a live kernel WebSocket has TCP_NODELAY set, unless the setting turns it off."""

from __future__ import annotations

import gc
import json
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection
from jupyter_server.services.kernels.websocket import KernelWebsocketHandler
from tornado.websocket import WebSocketClientConnection

from jupyter_sandbox.server_extension.kernel_websocket import sending_at_once

Fetch = Callable[..., Awaitable[Any]]


async def nodelay_of_a_live_kernel_websocket(jp_fetch: Fetch, jp_ws_fetch: Fetch) -> int:
    """TCP_NODELAY of the server's socket of a python3 kernel's WebSocket, read while open."""
    response = await jp_fetch("api", "kernels", method="POST", body=json.dumps({"name": "python3"}))
    kernel_id = json.loads(response.body)["id"]
    ws: WebSocketClientConnection = await jp_ws_fetch("api", "kernels", kernel_id, "channels")
    try:
        handlers = [
            o
            for o in gc.get_objects()
            if isinstance(o, KernelWebsocketHandler) and getattr(o, "kernel_id", None) == kernel_id
        ]
        assert len(handlers) == 1
        sock = handlers[0].ws_connection.stream.socket  # type: ignore[union-attr]
        return int(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
    finally:
        ws.close()
        await jp_fetch("api", "kernels", kernel_id, method="DELETE")


async def test_a_kernel_websocket_sends_at_once(jp_fetch: Fetch, jp_ws_fetch: Fetch) -> None:
    assert await nodelay_of_a_live_kernel_websocket(jp_fetch, jp_ws_fetch) == 1


class TestTurnedOff:
    @pytest.fixture
    def jp_server_config(self, jp_server_config: dict[str, Any]) -> dict[str, Any]:
        extension = {**jp_server_config["SandboxExtension"], "kernel_websocket_nodelay": False}
        return {**jp_server_config, "SandboxExtension": extension}

    async def test_the_setting_leaves_jupyter_servers_own(
        self, jp_fetch: Fetch, jp_ws_fetch: Fetch
    ) -> None:
        assert await nodelay_of_a_live_kernel_websocket(jp_fetch, jp_ws_fetch) == 0


def test_wrapping_twice_wraps_once() -> None:
    once = sending_at_once(ZMQChannelsWebsocketConnection)
    assert issubclass(once, ZMQChannelsWebsocketConnection)
    assert sending_at_once(once) is once
