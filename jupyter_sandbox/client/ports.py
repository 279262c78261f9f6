"""Servers that code in a sandbox started on its loopback (a web app, a dashboard, a model's
demo page), reached by URL: ``/api/sandboxes/{id}/ports`` and ``.../ports/{port}``.

Agent code reaches it as ``sandbox.ports`` (:class:`~jupyter_sandbox.client.Sandbox` makes
one). Each port's URL is served by the Jupyter Server, which relays every request (any method,
WebSockets too) to that port inside the sandbox; the sandbox itself keeps no network. The URL is
the credential: it needs no token, so whoever is given it (a browser, a headless test, a
person) reaches the sandbox's server with it, until the sandbox is removed or its URLs revoked
(:meth:`SandboxPorts.revoke`). Hand it out as you would a password.
"""

from __future__ import annotations

import builtins
import urllib.parse
from dataclasses import dataclass
from typing import Any

from jupyter_sandbox.client.errors import InvalidRequestError
from jupyter_sandbox.client.transport import Transport


@dataclass(frozen=True)
class Port:
    """A TCP port a server listens on in the sandbox: ``command`` is the command line of the
    process that listens ('' if it could not be seen), ``url`` the absolute URL that serves
    it (no token needed: the URL is the credential)."""

    port: int
    command: str
    url: str


class SandboxPorts:
    """The listening ports of one sandbox (``sandbox.ports``) and the URLs that serve them."""

    def __init__(self, transport: Transport, sandbox_id: str) -> None:
        self._transport = transport
        self.sandbox_id = sandbox_id

    def __repr__(self) -> str:
        return f"SandboxPorts({self.sandbox_id!r})"

    def list(self) -> builtins.list[Port]:
        """The TCP ports servers listen on in the sandbox now, smallest first, each with its
        command and URL. The sandbox's own machinery (its network forwarder, the kernel's
        internal pipe) is left out. SandboxConflictError if the sandbox is paused."""
        answer = self._transport.call("GET", "sandboxes", self.sandbox_id, "ports")
        return [
            Port(port=int(found["port"]), command=str(found["command"]), url=self._absolute(found))
            for found in answer["ports"]
        ]

    def url(self, port: int) -> str:
        """The absolute URL that serves ``port`` of the sandbox (as E2B's ``get_host``), ending
        in "/": a path under it is that path on the sandbox's server. It is given whether or
        not anything listens there yet, so it can be handed out before the server starts;
        until one does, following it answers 502."""
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            # Checked here too: in the path, the text "8000" would reach the server as port 8000.
            raise InvalidRequestError(f"port must be a whole number from 1 to 65535, not {port!r}")
        answer = self._transport.call("GET", "sandboxes", self.sandbox_id, "ports", str(port))
        return self._absolute(answer)

    def revoke(self) -> None:
        """Revoke every URL of the sandbox's ports handed out so far (shared ones included):
        they answer 404 from now on, while :meth:`url` and :meth:`list` give new ones.
        Connections already open through an old URL are not cut."""
        self._transport.call("DELETE", "sandboxes", self.sandbox_id, "ports")

    def _absolute(self, answer: dict[str, Any]) -> str:
        """The answer's ``url``, a path from the server's root (its base URL included), on the
        scheme, host and port this client reaches the server at."""
        return urllib.parse.urljoin(self._transport.url, str(answer["url"]))
