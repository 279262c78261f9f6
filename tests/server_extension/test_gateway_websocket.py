"""A server whose kernels are a gateway's relays their WebSockets as they are.

Two real ``jupyter server`` processes on 127.0.0.1: the *gateway*, a plain Jupyter Server
whose kernel API is what Kernel Gateway and the sandbox gateway serve (its ordinary python3
kernels: no engine is needed to test the relay), and the *user's server*, with this extension
and ``GatewayClient.url`` set to the gateway. The kernel WebSocket is the user's server's, as
JupyterLab opens it. The sandbox gateway's own relay, sandbox terminals included, is tested
through a real JupyterHub in tests/hub/test_gateway.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.websocket import WebSocketClientConnection, websocket_connect

from jupyter_sandbox.server_extension.gateway_websocket import GATEWAY_CLOSED, HANDSHAKE_SECONDS
from jupyter_sandbox.server_extension.port_links import PortLinks
from tests.conftest import left_in_state_dir
from tests.kernel.test_jupyter_server import Server, start_server, stop_process, wait_for_status
from tests.kernel_websocket import KERNEL_V1, cell_messages

EXTENSION = "jupyter_sandbox.server_extension"
TIMEOUT = 60.0  # seconds for a cell of the gateway's python3 kernel, or a closed connection
STOP_TIMEOUT = 20.0  # seconds for the server to stop on SIGTERM, its gateway gone
# A comm whose opening carries bytes that are no UTF-8 (and a NUL), then a print after it.
BINARY = b"\xff\x00\x80binary"
COMM_CELL = (
    "from comm import create_comm\n"
    f"comm = create_comm(target_name='relay-test', data={{}}, buffers=[{BINARY!r}])\n"
    "print('after the comm')"
)


@dataclass
class GatewayAndServer:
    gateway: Server
    server: Server

    def kernel_url(self, kernel_id: str) -> str:
        return f"ws://127.0.0.1:{self.server.port}/api/kernels/{kernel_id}/channels"

    async def connect(self, kernel_id: str, subprotocols: list[str]) -> WebSocketClientConnection:
        request = HTTPRequest(
            self.kernel_url(kernel_id),
            headers={"Authorization": f"token {self.server.token}"},
        )
        return await asyncio.wait_for(
            websocket_connect(request, subprotocols=subprotocols), timeout=TIMEOUT
        )


@pytest.fixture
async def gateway_and_server(tmp_path: Path, state_dir: Path) -> AsyncIterator[GatewayAndServer]:
    root = tmp_path / "notebooks"
    root.mkdir()
    gateway = start_server(
        root,
        tmp_path,
        f'--ServerApp.jpserver_extensions={{"{EXTENSION}": False}}',
        name="gateway",
    )
    try:
        await wait_for_status(gateway)
        server = start_server(
            root,
            tmp_path,
            f"--GatewayClient.url=http://127.0.0.1:{gateway.port}",
            f"--GatewayClient.auth_token={gateway.token}",
            f"--SandboxSettings.state_dir={state_dir}",
            name="server",
        )
        try:
            await wait_for_status(server)
            yield GatewayAndServer(gateway, server)
        finally:
            stop_process(server.process)
            # Nothing raised in the relay (a traceback through it names its file).
            assert "gateway_websocket.py" not in server.log_text(), server.log_text()
    finally:
        stop_process(gateway.process)


@pytest.fixture
async def kernel_id(gateway_and_server: GatewayAndServer) -> AsyncIterator[str]:
    server = gateway_and_server.server
    started = await server.request("POST", "/api/kernels", {"name": "python3"})
    kernel: str = json.loads(started.body)["id"]
    yield kernel
    with contextlib.suppress(HTTPClientError, OSError):  # the gateway may be gone already
        await server.request("DELETE", f"/api/kernels/{kernel}")


@pytest.mark.parametrize("protocol", [KERNEL_V1, None], ids=["v1", "legacy"])
async def test_a_message_with_binary_buffers_passes_and_so_does_what_follows(
    gateway_and_server: GatewayAndServer, kernel_id: str, protocol: str | None
) -> None:
    offered = [protocol] if protocol else []
    connection = await gateway_and_server.connect(kernel_id, offered)
    try:
        # The protocol the gateway chose is the client's: JupyterLab's when it offers it.
        assert connection.selected_subprotocol == protocol
        messages = await cell_messages(connection, COMM_CELL, TIMEOUT)
    finally:
        connection.close()
    # In order on iopub (shell's reply may come before or after: another channel).
    kinds = [m["header"]["msg_type"] for m in messages if m["channel"] == "iopub"]
    (opened,) = (m for m in messages if m["header"]["msg_type"] == "comm_open")
    assert opened["buffers"] == [BINARY]
    assert opened["content"]["target_name"] == "relay-test"
    printed = [m["content"]["text"] for m in messages if m["header"]["msg_type"] == "stream"]
    assert printed == ["after the comm\n"]
    assert kinds.index("comm_open") < kinds.index("stream")


async def test_a_gateway_that_goes_closes_the_clients_socket_and_none_opens(
    gateway_and_server: GatewayAndServer, kernel_id: str
) -> None:
    connection = await gateway_and_server.connect(kernel_id, [KERNEL_V1])
    try:
        await cell_messages(connection, "pass", TIMEOUT)  # the relay works
        stop_process(gateway_and_server.gateway.process)
        # What the gateway sent as it stopped (its kernel's last status), then the end.
        while await asyncio.wait_for(connection.read_message(), timeout=TIMEOUT) is not None:
            pass
    finally:
        connection.close()
    # No close frame came from the gateway: the client is told the relay's error and why.
    assert (connection.close_code, connection.close_reason) == (1011, GATEWAY_CLOSED)
    # A new connection is refused before its handshake, saying the gateway does not answer.
    with pytest.raises(HTTPClientError) as refused:
        await gateway_and_server.connect(kernel_id, [KERNEL_V1])
    assert refused.value.code == 502
    # And the server still stops on SIGTERM, leaving its kernel to the gateway (which would
    # cull it): Jupyter Server's stop raised on the unanswered shutdown, and hung.
    server = gateway_and_server.server
    os.killpg(server.process.pid, signal.SIGTERM)
    await asyncio.to_thread(server.process.wait, STOP_TIMEOUT)
    assert "the gateway did not shut this server's kernels down" in server.log_text()


async def test_the_server_keeps_no_sandboxes_of_its_own(
    gateway_and_server: GatewayAndServer, state_dir: Path
) -> None:
    """Its kernels start at the gateway: no warm pool, zygote or culler here, though this
    host's engine is at hand (the test runs as root)."""
    log = gateway_and_server.server.log_text()
    assert "warm pool and fast kernel start: at the gateway" in log, log
    assert "zygote" not in log.lower(), log
    # Its state directory holds only the key of port links (made with the extension's settings).
    assert left_in_state_dir(state_dir) == [PortLinks.key_file], log


async def test_a_handshake_refused_after_the_gateways_socket_opened_closes_it(
    gateway_and_server: GatewayAndServer, kernel_id: str
) -> None:
    """The gateway's socket opens before the client's handshake ends: a handshake that fails
    after it (here an unknown WebSocket version, 426) must not leave it open."""
    server = gateway_and_server.server
    request = HTTPRequest(
        gateway_and_server.kernel_url(kernel_id).replace("ws://", "http://", 1),
        headers={
            "Authorization": f"token {server.token}",
            "Upgrade": "websocket",
            "Connection": "Upgrade",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
            "Sec-WebSocket-Version": "99",
        },
    )
    answer = await AsyncHTTPClient().fetch(request, raise_error=False)
    assert answer.code == 426, answer
    # The gateway counts the WebSockets open to its kernel: ours goes.
    gateway = gateway_and_server.gateway
    deadline = time.monotonic() + HANDSHAKE_SECONDS + TIMEOUT
    while (await connections_at(gateway, kernel_id)) != 0:
        assert time.monotonic() < deadline, server.log_text()
        await asyncio.sleep(0.2)
    assert "the client's handshake failed" in server.log_text()


async def connections_at(gateway: Server, kernel_id: str) -> int:
    """The kernel WebSockets open to ``kernel_id`` at the gateway (Jupyter Server's model)."""
    model = json.loads((await gateway.request("GET", f"/api/kernels/{kernel_id}")).body)
    count: int = model["connections"]
    return count
