"""E2B's credentials: the API key a control-plane request carries, and the access token of one
sandbox that every data-plane request carries.

The API key is ``e2b_`` followed by a token the Jupyter server itself accepts (its own token,
or a hub token on a JupyterHub single-user server): control_plane.py hands it to the server's
identity provider as ``Authorization: token ...``, so a key is exactly as good as that token and
the owner is that token's user. Older SDKs refuse a key that is not ``e2b_`` and hex digits, so
the server's token must then be hex (``jupyter server --IdentityProvider.token=$(openssl rand
-hex 24)``).

A sandbox's access token (E2B's ``envdAccessToken``, sent back as ``X-Access-Token``) is
``OWNER.MAC``: the owner in base64url and an HMAC-SHA256 of the owner and the sandbox id under a
key kept in the state directory (server_key.state_key). It is handed out only to its owner (at
create, connect and get), stays good across restarts and for the sandbox's life, names one
sandbox, and cannot be made without the key. The data plane acts as the owner it names, on that
sandbox alone, so ownership is checked by the same core calls as everywhere else.
"""

from __future__ import annotations

import base64
import binascii
import hmac

from jupyter_sandbox.e2b_api.errors import E2BAuthenticationError
from jupyter_sandbox.server_extension.server_key import ServerMac

KEY_PREFIX = "e2b_"
MAX_TOKEN = 1024  # characters of an access token read from a request, before anything else
MAX_OWNER = 256  # bytes of the owner an access token names


def jupyter_token(api_key: str | None) -> str:
    """The Jupyter token inside ``api_key`` (``e2b_TOKEN``), or E2BAuthenticationError."""
    if not api_key or not api_key.startswith(KEY_PREFIX) or len(api_key) == len(KEY_PREFIX):
        raise E2BAuthenticationError(
            "the X-API-KEY header must be e2b_ followed by this Jupyter server's token "
            "(E2B_API_KEY=e2b_$JUPYTER_TOKEN)"
        )
    return api_key[len(KEY_PREFIX) :]


class AccessTokens(ServerMac):
    """Makes and checks sandboxes' access tokens (one per server, built at start)."""

    key_file = "e2b-access.key"

    def token(self, owner: str, sandbox_id: str) -> str:
        named = base64.urlsafe_b64encode(owner.encode()).decode().rstrip("=")
        return f"{named}.{self._mac(owner, sandbox_id)}"

    def owner(self, token: str | None, sandbox_id: str) -> str:
        """The owner ``token`` was made for, if it was made for ``sandbox_id`` with this
        server's key; E2BAuthenticationError otherwise (one message for every cause)."""
        refusal = E2BAuthenticationError(
            "the X-Access-Token header is missing or not the access token of sandbox "
            f"{sandbox_id!r}: use the envdAccessToken that creating or connecting to it returned"
        )
        if not token or len(token) > MAX_TOKEN or token.count(".") != 1:
            raise refusal
        named, mac = token.split(".")
        try:
            owner_bytes = base64.urlsafe_b64decode(named + "=" * (-len(named) % 4))
            owner = owner_bytes.decode()
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise refusal from None
        if not owner or len(owner_bytes) > MAX_OWNER:
            raise refusal
        if not hmac.compare_digest(mac.encode(), self._mac(owner, sandbox_id).encode()):
            raise refusal
        return owner

    def _mac(self, owner: str, sandbox_id: str) -> str:
        return self.mac(f"e2b-access\0{owner}\0{sandbox_id}".encode())
