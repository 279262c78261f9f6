"""A sandbox's ports: their links over REST, and the proxy that serves them to the browser.

* ``GET /api/sandboxes/{id}/ports``: the servers listening in the sandbox now (port, command)
  with the link of each; ``GET /api/sandboxes/{id}/ports/{port}``: the link of one port, before
  anything listens there if need be (as E2B's ``get_host``); ``DELETE /api/sandboxes/{id}/ports``:
  revoke every link handed out so far. All for the sandbox's owner only.
* ``<base_url>sandbox-ports/{id}/{port}/{token}/{path}``: any method, WebSockets too, relayed
  to the server on that port of the sandbox (port_relay.py), which sees ``/{path}``. The link
  is the credential (port_links.py says why the user's login cannot be): a wrong token, a
  removed sandbox and another owner's all answer the same 404.
  Each relayed connection holds two of the server's file descriptors while it lasts, so
  they are counted to the sandbox's owner (SandboxExtension.max_port_relays_per_owner, and
  max_port_relays for the server): one past either is a 429, nothing connected.

The proxy is not a JupyterHandler on purpose: Jupyter's login, XSRF check and cookies belong to
the user's session, which the sandbox's pages must never touch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from jupyter_server.auth.decorator import allow_unauthenticated, authorized
from tornado import iostream, web

from jupyter_sandbox.protocol.errors import InvalidRequestError, SandboxError, SandboxNotFoundError
from jupyter_sandbox.sandbox.host.fair_share import current_owner
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.operations.port_answer import MalformedAnswer
from jupyter_sandbox.sandbox.operations.ports import check_port
from jupyter_sandbox.server_extension.base import (
    SANDBOX_ID,
    ExtensionServices,
    SandboxAPIHandler,
)
from jupyter_sandbox.server_extension.port_links import (
    GENERATION_KEY,
    PREFIX,
    generation_of,
    masked,
)
from jupyter_sandbox.server_extension.port_relay import (
    CHUNK,
    RelayIdleError,
    relay_http,
    relay_websocket,
)

log = logging.getLogger(__name__)

_PORT = r"(?P<port>[^/]+)"  # checked by check_port, which says what a port is
MAX_BODY = 100 * 1024**2  # bytes of a request body or of an answer's, at most


class SandboxPortsHandler(SandboxAPIHandler):
    """``/api/sandboxes/{id}/ports``: what listens in the sandbox, with links; ``DELETE``
    revokes every link of the sandbox handed out so far."""

    @web.authenticated
    @authorized
    async def get(self, sandbox_id: str) -> None:
        found = await self.manager.ports.listening(self.owner, sandbox_id)
        link = self.links_of(sandbox_id)
        self.write_json(
            {"ports": [{"port": p.port, "command": p.command, "url": link(p.port)} for p in found]}
        )

    @web.authenticated
    @authorized
    async def delete(self, sandbox_id: str) -> None:
        await self.manager.get(self.owner, sandbox_id)
        directory = SandboxDirectory(self.manager.settings.state_path, sandbox_id)
        # Under the state's lock: two revocations at once both move the generation on.
        directory.modify_state(lambda state: {**state, GENERATION_KEY: generation_of(state) + 1})
        log.info("links to the ports of sandbox %s revoked", sandbox_id)
        self.set_status(204)
        self.finish()

    def links_of(self, sandbox_id: str) -> Callable[[int], str]:
        """The link of each port of the sandbox, at its current generation (read once)."""
        generation = generation_of(self.manager.read_state(sandbox_id))
        links, owner = self.extension.port_links, self.owner
        return lambda port: links.path(self.base_url, owner, sandbox_id, port, generation)


class SandboxPortHandler(SandboxPortsHandler):
    """``/api/sandboxes/{id}/ports/{port}``: the link of one port."""

    # Not inherited: revoking is the whole sandbox's (DELETE .../ports); here it is a 405
    # (inherited, it was called with the port too, and answered 500).
    delete = SandboxAPIHandler.delete

    @web.authenticated
    @authorized
    async def get(self, sandbox_id: str, port: str) -> None:
        number = check_port(port)
        await self.manager.get(self.owner, sandbox_id)
        self.write_json({"port": number, "url": self.links_of(sandbox_id)(number)})


class PortProxyHandler(web.RequestHandler):
    """``sandbox-ports/{id}/{port}/{token}/{path}``: the browser's way into a sandbox's port."""

    SUPPORTED_METHODS = ("GET", "HEAD", "POST", "DELETE", "PATCH", "PUT", "OPTIONS")

    # The stream to the sandbox's server while an HTTP request is relayed (closed when the
    # browser leaves), and whether it left.
    _upstream: iostream.IOStream | None = None
    _client_gone = False

    def check_xsrf_cookie(self) -> None:
        """The link's token authenticates the request; Jupyter's XSRF cookie is not ours."""

    @property
    def extension(self) -> ExtensionServices:
        return self.settings["sandbox_extension"]  # type: ignore[no-any-return]

    async def prepare(self) -> None:
        # What the access log shows (the Referer too, for failed requests): no link's token.
        # Neither is sent on to the sandbox; the routing is done.
        self.request.uri = masked(self.request.uri or "")
        if "Referer" in self.request.headers:
            self.request.headers["Referer"] = masked(self.request.headers["Referer"])

    # Deliberately outside Jupyter's login (jupyter_server warns of routes that are not).
    @allow_unauthenticated
    async def _serve(self, sandbox_id: str, port: str, token: str, path: str | None) -> None:
        # The path as the browser sent it (tornado's arguments are unquoted), after the token.
        raw = self.request.path
        cut = raw.index(f"/{token}") + len(token) + 1
        prefix, path = raw[:cut], raw[cut:]
        query = f"?{self.request.query}" if self.request.query else ""
        if not path:  # the app's relative links need the trailing slash
            self.redirect(f"{prefix}/{query}", permanent=False)
            return
        try:
            number = check_port(port)
            owner = self._owner_if_valid(sandbox_id, number, token)
        except SandboxError as exc:
            self._plain(exc.http_status, exc.message)
            return
        # Counted before connecting: a refused relay opens nothing in the sandbox.
        extension = self.extension
        relays = extension.port_relays
        refusal = relays.refusal(
            owner, extension.max_port_relays_per_owner, extension.max_port_relays
        )
        if refusal is not None:
            self._plain(429, refusal)
            return
        relays.take(owner)
        try:
            await self._connect_and_relay(owner, sandbox_id, number, path + query, prefix)
        finally:
            relays.give_back(owner)

    async def _connect_and_relay(
        self, owner: str, sandbox_id: str, port: int, target: str, prefix: str
    ) -> None:
        try:
            # The link's owner is who this request's engine calls are counted to (fair_share.py),
            # not the server's own share, which the culler and the pools use.
            current_owner.set(owner)
            sock = await self.extension.manager.ports.connect(owner, sandbox_id, port)
        except SandboxError as exc:
            self._plain(exc.http_status, exc.message)
            return
        upstream = iostream.IOStream(sock, read_chunk_size=CHUNK)
        if self.request.headers.get("Upgrade", "").lower() == "websocket":
            await relay_websocket(self, upstream, target, prefix)
        else:
            await self._relay(upstream, target, prefix)

    async def _relay(self, upstream: iostream.IOStream, target: str, prefix: str) -> None:
        self._upstream = upstream
        if self._client_gone:  # it left while the connection was made
            upstream.close()
            return
        try:
            await relay_http(
                self, upstream, target, prefix, MAX_BODY, self.extension.port_relay_idle_timeout
            )
        except MalformedAnswer as exc:  # nothing of it reached the browser
            log.debug("a sandbox's port answered with a malformed head: %s", exc.message)
            if not self._headers_written:
                self._plain(exc.http_status, exc.message)
        except RelayIdleError as exc:
            log.debug("a relay to a sandbox's port was idle: %s", exc)
            if not self._headers_written and not self._client_gone:
                self._plain(504, str(exc))
        except Exception as exc:  # the sandbox's server misbehaved or went away
            log.debug("relay to a sandbox's port failed: %r", exc)
            if not self._headers_written and not self._client_gone:
                self._plain(502, "the sandbox's server closed the connection without an answer")
        finally:
            self._upstream = None

    def on_connection_close(self) -> None:
        # The browser left: the stream to the sandbox's server is closed, which ends the relay
        # wherever it waits (the server's answer, a body it does not read).
        self._client_gone = True
        if self._upstream is not None:
            self._upstream.close()
        super().on_connection_close()

    def _owner_if_valid(self, sandbox_id: str, port: int, token: str) -> str:
        """The sandbox's owner when ``token`` is the link's; SandboxNotFoundError otherwise."""
        manager = self.extension.manager
        try:
            state = manager.read_state(sandbox_id)
        except (InvalidRequestError, OSError, ValueError):
            state = {}
        owner = state.get("owner")
        if not isinstance(owner, str) or not self.extension.port_links.valid(
            token, owner, sandbox_id, port, generation_of(state)
        ):
            raise SandboxNotFoundError("no such sandbox port link (the sandbox may be gone)")
        return owner

    def _plain(self, status: int, message: str) -> None:
        """An error page the browser shows as text (never the sandbox's HTML)."""
        self.clear()
        self.set_status(status)
        self.set_header("Content-Type", "text/plain; charset=UTF-8")
        self.set_header("X-Content-Type-Options", "nosniff")
        self.finish(f"jupyter-sandbox: {message}\n")

    get = post = put = patch = delete = options = head = _serve


port_handlers: list[tuple[str, Any]] = [
    (rf"/api/sandboxes/{SANDBOX_ID}/ports/?", SandboxPortsHandler),
    (rf"/api/sandboxes/{SANDBOX_ID}/ports/{_PORT}/?", SandboxPortHandler),
    (
        rf"/{PREFIX}/(?P<sandbox_id>[^/]+)/{_PORT}/(?P<token>[A-Za-z0-9_=-]+)(?P<path>/.*)?",
        PortProxyHandler,
    ),
]
