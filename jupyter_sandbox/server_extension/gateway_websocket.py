"""The WebSockets of a server whose kernels are a sandbox gateway's: relayed there as they are.

A user's server under the sandbox gateway (docs/how-to/jupyterhub-gateway.md) has two kinds of
WebSocket to pass on: its kernels' channels, Jupyter Server's own route, whose connection class
is :class:`GatewayKernelConnection`; and a sandbox's terminal, :class:`GatewayTerminalHandler`.
Both relay every message as it came, text as text and binary as binary, in order, and both open
the gateway's WebSocket *before* answering the client's handshake: a refusal (another user's
kernel or sandbox, one that is gone, a gateway that does not answer) is the client's refusal
too, with the gateway's status and message, and the client's subprotocol is the one the gateway
chose.

Jupyter Server's own gateway connection (``jupyter_server.gateway.connections``) is replaced
because of two faults of its relay. It decodes every message from the gateway as UTF-8 text and
sends text only, so the first kernel message that carries binary buffers (a widget's array, a
comm's bytes) raises in its reader, and no later message of that kernel reaches the client: the
cell seems to hang. And it speaks only the legacy JSON protocol, so the gateway parses and
re-encodes every message, where JupyterLab's ``v1.kernel.websocket.jupyter.org`` lets it pass
the parts on unread. When the gateway's socket closes, the client's is closed with the
gateway's code and reason: JupyterLab reconnects, which opens a new one.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from jupyter_server.auth.decorator import ws_authenticated
from jupyter_server.base.websocket import WebSocketMixin
from jupyter_server.gateway.connections import GatewayWebSocketConnection
from jupyter_server.gateway.gateway_client import GatewayClient
from jupyter_server.utils import url_escape, url_path_join
from tornado import httpclient, httputil, web
from tornado.iostream import StreamClosedError
from tornado.websocket import (
    WebSocketClientConnection,
    WebSocketClosedError,
    WebSocketHandler,
    websocket_connect,
)
from traitlets import Int

from jupyter_sandbox.server_extension.base import (
    SANDBOX_ID,
    SandboxHandlerBase,
    authorized_to_execute,
)

log = logging.getLogger(__name__)

KERNEL_CONNECTION_SETTING = "kernel_websocket_connection_class"  # Jupyter Server's web app's
KERNEL_V1 = "v1.kernel.websocket.jupyter.org"  # the protocol JupyterLab offers first
# The gateway's answer to a refused handshake is relayed only up to this many bytes.
MAX_REFUSAL_BYTES = 64 * 1024
# Largest message taken from the gateway's terminal (bytes): each holds one read of the shell's
# output (64 KiB at most, backends/docker/terminal.py), JSON-escaped.
TERMINAL_MESSAGE_BYTES = 1024 * 1024
# Seconds from the gateway's socket opening to the client's handshake's end, at most: it
# follows at once, in the same request.
HANDSHAKE_SECONDS = 10.0
# Close codes a peer may send (RFC 6455 7.4): others are replaced by 1011 when relayed.
SENDABLE_CLOSE_CODES = (1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011)
GATEWAY_CLOSED = "the sandbox gateway closed this connection"


class GatewayRefused(web.HTTPError):
    """The gateway refused to open the WebSocket: its status, and its answer's body as is."""

    def __init__(self, status: int, body: bytes, content_type: str) -> None:
        super().__init__(status, "the sandbox gateway answered %s: %s", status, said(body))
        self.body = body
        self.content_type = content_type


def said(body: bytes) -> str:
    """The message of a JSON error answer (Jupyter's and ours: ``{"message": ...}``), for the
    log; the answer is the gateway's, so it is shortened and never trusted to be JSON."""
    try:
        message = json.loads(body).get("message")
    except (ValueError, AttributeError, RecursionError):  # not JSON, not an object, too deep
        message = None
    return message[:200] if isinstance(message, str) else "(no message)"


def offered_subprotocols(request: httputil.HTTPServerRequest) -> list[str]:
    """The subprotocols the client's handshake offers, in its order of preference."""
    offered = request.headers.get("Sec-WebSocket-Protocol", "")
    return [name.strip() for name in offered.split(",") if name.strip()]


async def open_gateway_websocket(
    path: str, subprotocols: list[str], max_message_size: int = TERMINAL_MESSAGE_BYTES
) -> WebSocketClientConnection:
    """The gateway's WebSocket at ``path`` (relative to ``GatewayClient.url``), opened with the
    server's gateway credentials; GatewayRefused with the gateway's answer if it refuses, a 502
    if it does not answer."""
    gateway = GatewayClient.instance()
    url = url_path_join(str(gateway.ws_url), path)
    arguments: dict[str, Any] = gateway.load_connection_args()  # type: ignore[no-untyped-call]
    request = httpclient.HTTPRequest(url, **arguments)
    try:
        connection = await websocket_connect(
            request, subprotocols=subprotocols, max_message_size=max_message_size
        )
    except httpclient.HTTPClientError as exc:
        if exc.code == 599 or exc.response is None:  # no answer at all (a timeout)
            raise web.HTTPError(
                502, f"the sandbox gateway at {gateway.url} does not answer: {exc}"
            ) from None
        body = exc.response.body[:MAX_REFUSAL_BYTES] if exc.response.body else b""
        content_type = exc.response.headers.get("Content-Type", "application/json")
        raise GatewayRefused(exc.code, body, content_type) from None
    except (OSError, StreamClosedError) as exc:  # refused, reset
        raise web.HTTPError(
            502, f"the sandbox gateway at {gateway.url} does not answer: {exc!r}"
        ) from None
    # Each message on at once, not after the gateway acknowledged the one before
    # (kernel_websocket.py says why).
    if connection.protocol is not None:
        connection.protocol.set_nodelay(True)
    return connection


def relayable(code: int | None) -> int | None:
    """The close code to pass on for one received: itself if a peer may send it, 1011 for one
    only an endpoint may report (1005 none given, 1006 no close frame: the connection
    dropped), None for none."""
    if code is None or code in SENDABLE_CLOSE_CODES or 3000 <= code <= 4999:
        return code
    return 1011


async def relay_to_client(
    gateway: WebSocketClientConnection, client: WebSocketHandler, what: str
) -> None:
    """Every message from the gateway to the client, as it came, until one side closes; if it
    was the gateway, the client's socket is closed with the gateway's code and reason."""
    while (message := await gateway.read_message()) is not None:
        try:  # awaited until sent: a client that reads slowly holds the gateway back
            await client.write_message(message, binary=isinstance(message, bytes))
        except WebSocketClosedError:
            return
    if client.ws_connection is None:
        return  # the client closed first, and its close closed the gateway's socket
    log.info("%s: %s (%s)", what, GATEWAY_CLOSED, gateway.close_code)
    # No close frame from the gateway (it stopped, or its connection dropped) is an error.
    code = relayable(gateway.close_code) or 1011
    client.close(code, gateway.close_reason or GATEWAY_CLOSED)


class GatewayKernelConnection(GatewayWebSocketConnection):
    """A kernel's channels, relayed to the gateway's as they are (module docstring).

    Jupyter Server's kernel WebSocket handler makes one per client connection, calls
    :meth:`prepare` before the handshake (the gateway's socket opens then, and its protocol
    becomes the one offered to the client), :meth:`connect` once the client's socket is open,
    :meth:`handle_incoming_message` for each client message and :meth:`disconnect` when the
    client has gone."""

    max_message_size = Int(
        1 << 30,
        config=True,
        help="""Largest kernel message taken from the gateway (bytes); a larger one ends the
        connection (JupyterLab reconnects). The gateway's kernels cap a cell's whole output
        (SandboxSettings.max_cell_output), so this only bounds what one message may hold.""",
    )

    _relaying: asyncio.Task[None] | None = None

    async def prepare(self) -> None:
        # Only the protocols Jupyter Server's kernel WebSockets speak: none (the legacy JSON
        # one) or v1. What the gateway chose is what the client's handshake answers with.
        offered = offered_subprotocols(self.websocket_handler.request)
        wanted = [KERNEL_V1] if KERNEL_V1 in offered else []
        path = url_path_join(
            GatewayClient.instance().kernels_endpoint, url_escape(self.kernel_id), "channels"
        )
        if self.session_id:
            path += f"?session_id={url_escape(self.session_id)}"
        self.ws = await open_gateway_websocket(path, wanted, self.max_message_size)
        self.kernel_ws_protocol = self.ws.selected_subprotocol or ""
        # The client's handshake follows at once; one refused after this (a bad key, a client
        # gone) never calls connect() nor disconnect(): the gateway's socket would stay open.
        loop = asyncio.get_running_loop()
        loop.call_later(HANDSHAKE_SECONDS, self._close_if_never_opened)

    def _close_if_never_opened(self) -> None:
        if self._relaying is None and self.ws is not None:
            log.warning(
                "kernel %s: the client's handshake failed after the gateway's WebSocket opened; "
                "closing that",
                self.kernel_id,
            )
            self.ws.close()

    async def connect(self) -> None:
        # The kernel WebSocket handler's open(): the client's socket is up.
        assert self.ws is not None
        self._relaying = asyncio.ensure_future(
            relay_to_client(self.ws, self.websocket_handler, f"kernel {self.kernel_id}")
        )

    def handle_incoming_message(self, message: str | bytes) -> None:
        if self.ws is None or self.disconnected:
            return
        try:
            self.ws.write_message(message, binary=isinstance(message, bytes))
        except WebSocketClosedError:  # the relay from the gateway closes the client's socket
            log.debug("kernel %s: a message after the gateway's socket closed", self.kernel_id)


class GatewayTerminalHandler(WebSocketMixin, SandboxHandlerBase, WebSocketHandler):
    """``/api/sandboxes/{id}/terminal``: the gateway's terminal WebSocket, relayed."""

    _gateway: WebSocketClientConnection | None = None
    _relaying: asyncio.Task[None] | None = None

    @ws_authenticated
    @authorized_to_execute
    async def get(self, sandbox_id: str) -> None:
        if self.request.headers.get("Upgrade", "").lower() != "websocket":
            raise web.HTTPError(
                400, "this route is a WebSocket: connect with a WebSocket client (ws:// or wss://)"
            )
        # Checked again by tornado at the upgrade; here so that no shell starts for a page of
        # another site (a browser sends its cookies with a cross-site WebSocket).
        origin = self.request.headers.get("Origin")
        if origin is not None and not self.check_origin(origin):
            raise web.HTTPError(403, "cross-origin WebSocket refused")
        relative = self.request.uri[len(self.base_url) :] if self.request.uri else ""
        self._gateway = await open_gateway_websocket(relative, offered_subprotocols(self.request))
        try:
            await super().get(sandbox_id)  # the upgrade; returns once the connection has ended
        finally:
            self._gateway.close()
            if self._relaying is not None:
                self._relaying.cancel()
                await asyncio.gather(self._relaying, return_exceptions=True)

    def select_subprotocol(self, subprotocols: list[str]) -> str | None:
        assert self._gateway is not None
        return self._gateway.selected_subprotocol

    async def open(self, sandbox_id: str) -> None:
        super().open(sandbox_id)  # WebSocketMixin's: keep-alive pings
        self.set_nodelay(True)  # each echo of a keystroke at once
        assert self._gateway is not None
        self._relaying = asyncio.ensure_future(
            relay_to_client(self._gateway, self, f"terminal of sandbox {sandbox_id}")
        )

    async def on_message(self, message: str | bytes) -> None:
        if self._gateway is None:
            return
        try:  # awaited: tornado reads the client's next message once this one is sent on
            await self._gateway.write_message(message, binary=isinstance(message, bytes))
        except WebSocketClosedError:
            return  # the relay from the gateway closes the client's socket

    def on_close(self) -> None:
        if self._gateway is not None:
            self._gateway.close(relayable(self.close_code), self.close_reason)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, GatewayRefused):  # the gateway's own answer, as it gave it
            self.set_header("Content-Type", exc.content_type)
            self.finish(exc.body)
            return
        self.write_error_json(status_code, exc)


def relay_kernels_as_they_are(web_app_settings: dict[str, Any]) -> None:
    """Relay the server's kernel WebSockets with :class:`GatewayKernelConnection` where Jupyter
    Server chose its own gateway connection (``GatewayClient.url`` set), not a class of the
    server's configuration."""
    if web_app_settings.get(KERNEL_CONNECTION_SETTING) is GatewayWebSocketConnection:
        web_app_settings[KERNEL_CONNECTION_SETTING] = GatewayKernelConnection


gateway_websocket_handlers = [
    (rf"/api/sandboxes/{SANDBOX_ID}/terminal/?", GatewayTerminalHandler),
]
