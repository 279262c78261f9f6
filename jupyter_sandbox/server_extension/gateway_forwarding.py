"""The sandbox REST API of a server whose kernels are a sandbox gateway's: forwarded there.

A JupyterHub user's server under the sandbox gateway (docs/how-to/jupyterhub-gateway.md) holds
no container engine: its kernels live at the gateway (``GatewayClient.url``), and so do its
user's sandboxes (and the credentials their proxies add). Each ``/api/sandboxes…``,
``/api/snapshots…``, ``/api/credentials…`` and ``/api/sandbox-features`` request is sent on to the gateway with the server's own gateway token (the user's, so the
gateway answers for that user only), and the answer is relayed as it arrives: its status, a
few headers, and its body chunk by chunk, so that event streams (SSE) and streamed commands
keep flowing. Sandbox terminals are WebSockets: gateway_websocket.py relays them.
"""

from __future__ import annotations

from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import httputil, web
from tornado.httpclient import AsyncHTTPClient, HTTPRequest

AUTH_RESOURCE = "sandboxes"
# The gateway's answer headers a client needs; nothing else it sends is relayed.
RELAYED_HEADERS = ("Content-Type", "Content-Disposition", "Cache-Control", "Allow", "Retry-After")
_RELAYED = {name.lower(): name for name in RELAYED_HEADERS}
# Seconds a forwarded request may last: event streams and followed output stay open for long.
FORWARD_TIMEOUT = 24 * 3600.0
BODY_METHODS = ("POST", "PUT", "PATCH")


class GatewayForwardingHandler(APIHandler):
    """Every method of every sandbox route, sent on to the gateway as it came."""

    auth_resource = AUTH_RESOURCE

    @web.authenticated
    @authorized
    async def forwarded(self, path: str) -> None:
        """A request of any method: jupyter_server's checks, then sent on as it came."""
        await self.forward()

    # tornado calls the method named as the request's: every one the sandbox routes take.
    get = post = put = patch = delete = forwarded

    async def forward(self) -> None:
        gateway = self.serverapp.gateway_config  # type: ignore[union-attr]
        relative = self.request.uri[len(self.base_url) :] if self.request.uri else ""
        url = url_path_join(str(gateway.url), relative)
        headers = {"Content-Type": self.request.headers.get("Content-Type", "application/json")}
        arguments: dict[str, Any] = gateway.load_connection_args(headers=headers)
        arguments["request_timeout"] = FORWARD_TIMEOUT
        request = HTTPRequest(
            url,
            method=self.request.method or "GET",
            body=self.request.body if self.request.method in BODY_METHODS else None,
            header_callback=self._relay_header,
            streaming_callback=self._relay_chunk,
            follow_redirects=False,
            allow_nonstandard_methods=True,
            **arguments,
        )
        response = await AsyncHTTPClient().fetch(request, raise_error=False)
        if response.code == 599:  # no answer at all (refused, reset, timed out)
            raise web.HTTPError(
                502, f"the sandbox gateway at {gateway.url} does not answer: {response.error}"
            )
        self.finish(set_content_type=self._headers.get("Content-Type", "application/json"))

    def _relay_header(self, line: str) -> None:
        if line.startswith("HTTP/"):
            status = httputil.parse_response_start_line(line.strip())
            self.set_status(status.code, status.reason)
            return
        name, colon, value = line.partition(":")
        relayed = _RELAYED.get(name.strip().lower())
        if colon and relayed is not None:  # not the blank line that ends the head
            self.set_header(relayed, value.strip())

    def _relay_chunk(self, chunk: bytes) -> None:
        self.write(chunk)
        self.flush()


forwarding_handlers = [
    (
        r"/api/(?P<path>sandboxes(?:/.*)?|snapshots(?:/.*)?|credentials(?:/.*)?|sandbox-features/?)",
        GatewayForwardingHandler,
    )
]
