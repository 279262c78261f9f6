"""Links to a sandbox's port: capability URLs the browser can follow without the user's login.

A page served from a sandbox must never run with the user's Jupyter session (it would be the
sandbox's code acting as the user: reading other sandboxes, starting kernels on the host). So
the proxy (port_handlers.py) serves it under a Content-Security-Policy ``sandbox`` without
``allow-same-origin``: an opaque origin, whose requests carry none of Jupyter's cookies. The
link itself must therefore be the credential, as E2B's and OpenSandbox's sandbox URLs are:

    <base_url>sandbox-ports/<sandbox id>/<port>/<token>/

``token`` is an HMAC-SHA256 of the owner, the sandbox id, the port and the sandbox's link
generation under a key kept in the state directory (server_key.py), so a link stays good
across server restarts for as long as its sandbox lives, names one port of one sandbox, and
cannot be made without the key. Only the REST API hands links out, to the sandbox's owner;
whoever holds one reaches that port until the sandbox is removed or its owner revokes its links
(``DELETE /api/sandboxes/{id}/ports``), which moves the generation on: every link made before
answers 404, links asked for after are new. The token never reaches a log: the proxy masks every link's token in
the request it logs, its URI and its Referer (:func:`masked`).
"""

from __future__ import annotations

import hmac
import re
from typing import Final

from jupyter_server.utils import url_path_join

from jupyter_sandbox.sandbox.host.state_record import SandboxState
from jupyter_sandbox.server_extension.server_key import ServerMac

PREFIX = "sandbox-ports"
MASK = "[token]"
GENERATION_KEY: Final = "port_links_generation"  # in the sandbox's host-only state file


class PortLinks(ServerMac):
    """Makes and checks the links of sandboxes' ports (one per server, built at start)."""

    key_file = "port-links.key"

    def token(self, owner: str, sandbox_id: str, port: int, generation: int) -> str:
        return self.mac(f"{owner}\0{sandbox_id}\0{port}\0{generation}".encode())

    def valid(self, token: str, owner: str, sandbox_id: str, port: int, generation: int) -> bool:
        expected = self.token(owner, sandbox_id, port, generation)
        return hmac.compare_digest(token.encode(), expected.encode())

    def path(self, base_url: str, owner: str, sandbox_id: str, port: int, generation: int) -> str:
        """The link, as a path from the server's root (``base_url`` included), ending in /."""
        token = self.token(owner, sandbox_id, port, generation)
        return url_path_join(base_url, PREFIX, sandbox_id, str(port), token) + "/"


def generation_of(state: SandboxState) -> int:
    """The sandbox's link generation, from its state (0 until its links are first revoked)."""
    generation = state.get(GENERATION_KEY, 0)
    return generation if isinstance(generation, int) else 0


_LINK_TOKEN = re.compile(rf"({PREFIX}/[^/?#]+/[0-9]+/)[A-Za-z0-9_=-]+")


def masked(text: str) -> str:
    """``text`` (a URI, a Referer) with the token of every link in it replaced by a mark."""
    return _LINK_TOKEN.sub(rf"\g<1>{MASK}", text)
