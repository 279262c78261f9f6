"""Who a request to the gateway is: the JupyterHub user its hub-issued token belongs to.

The gateway runs as a JupyterHub service (hub-managed or external) and asks the hub about every
token it is shown (JupyterHub's HubAuth, its answers cached for ``HubAuth.cache_max_age``). The
token must carry the service's access scope as JupyterHub defines it
(``access:services!service=<name>``, from ``$JUPYTERHUB_OAUTH_ACCESS_SCOPES``); the request's
user is the token's hub user, and nothing else in the request (headers, ``KERNEL_USERNAME``,
a query) can name another. Tokens of services, not users, own nothing here and are refused.

Admin access is explicit: a token holding the custom scope ``custom:sandbox-gateway:admin``
(declared in ``c.JupyterHub.custom_scopes`` and granted by a role, to an admin or a service)
may act as a named user by sending ``Sandbox-Act-As: <hub user>`` (one such header, one name:
anything else is a 400); each such request is logged with who acted as whom. The header from any other token is refused (403), never ignored.

Only the ``Authorization: token …`` (or ``bearer``) header is read, and ``?token=`` on a
WebSocket (as HubAuth does, since browsers cannot set headers there); cookies are not, so no
page of another origin can ride a user's session here.
"""

from __future__ import annotations

from typing import Any

from jupyter_server.auth.identity import IdentityProvider, User
from tornado import web
from traitlets import Instance, default

from jupyter_sandbox.protocol.errors import InvalidSettingError

ADMIN_SCOPE = "custom:sandbox-gateway:admin"
ACT_AS_HEADER = "Sandbox-Act-As"


MAX_NAME_LENGTH = 200


def _hub_user_name(name: str) -> bool:
    """Could ``name`` be a hub user's? Not a list ('alice,bob' is what a repeated header
    reads as), nor a path (it names the user's directory: kernel_env.py)."""
    return (
        0 < len(name) <= MAX_NAME_LENGTH
        and name.isprintable()
        and name == name.strip()
        and not any(c in name for c in ",/")
        and name not in (".", "..")
    )


class HubTokenIdentityProvider(IdentityProvider):
    """A request's user is the hub user of its token, if the token may use this service."""

    # Named, not imported: jupyterhub is the gateway's extra, and the docs' configuration
    # reference imports this module without it.
    hub_auth = Instance(
        "jupyterhub.services.auth.HubAuth",
        help="The hub's token check (JUPYTERHUB_API_URL and JUPYTERHUB_API_TOKEN).",
    )

    @default("hub_auth")
    def _default_hub_auth(self) -> Any:
        try:
            from jupyterhub.services.auth import HubAuth
        except ImportError:
            raise InvalidSettingError(
                "the gateway needs JupyterHub's service auth: pip install 'jupyter-sandbox[gateway]'"
            ) from None
        return HubAuth(parent=self)

    @default("need_token")
    def _default_need_token(self) -> bool:
        return False  # the hub's tokens, not one of the server's own

    @default("token")
    def _default_token(self) -> str:
        return ""

    async def get_user(self, handler: web.RequestHandler) -> User | None:
        token = self.hub_auth.get_token(handler, in_cookie=False)
        if not token:
            return None
        model: dict[str, Any] | None = await self.hub_auth.user_for_token(token, sync=False)
        if not model:
            return None
        # Each header apart: get() joins repeated ones with commas ('alice,bob').
        acting_as = handler.request.headers.get_list(ACT_AS_HEADER)
        if acting_as:
            return self._admin_acting_as(handler, model, acting_as)
        if model.get("kind") != "user":
            self.log.info("refused a %s's token: only hub users own kernels", model.get("kind"))
            return None
        if not self.hub_auth.check_scopes(self.hub_auth.access_scopes, model):
            self.log.info(
                "refused %s's token: it lacks %s",
                model["name"],
                sorted(self.hub_auth.access_scopes),
            )
            return None
        handler._token_authenticated = True  # type: ignore[attr-defined]  # no XSRF check
        name = str(model["name"])
        return User(username=name, name=name)

    def _admin_acting_as(
        self, handler: web.RequestHandler, model: dict[str, Any], names: list[str]
    ) -> User | None:
        who = f"{model.get('kind')} {model.get('name')}"
        request = f"{handler.request.method} {handler.request.path}"
        if not self.hub_auth.check_scopes({ADMIN_SCOPE}, model):
            self.log.warning(
                "refused %s acting as %s without %s: %s",
                who,
                ", ".join(map(repr, names[:2])),
                ADMIN_SCOPE,
                request,
            )
            return None
        if len(names) != 1:
            self.log.warning("refused %s acting as %d names: %s", who, len(names), request)
            raise web.HTTPError(
                400, f"send one {ACT_AS_HEADER} header, naming one hub user, not {len(names)}"
            )
        (owner,) = names
        if not _hub_user_name(owner):
            self.log.warning("refused %s acting as a malformed name: %s", who, request)
            raise web.HTTPError(
                400,
                f"{ACT_AS_HEADER} must name one hub user: printable, at most "
                f"{MAX_NAME_LENGTH} characters, no commas, slashes or surrounding spaces",
            )
        self.log.warning("admin access: %s acts as %s: %s", who, owner, request)
        handler._token_authenticated = True  # type: ignore[attr-defined]
        return User(username=owner, name=f"{model.get('name')} as {owner}")

    def get_handlers(self) -> list[tuple[str, object]]:
        return []  # no login page: the hub issues the tokens

    @property
    def login_available(self) -> bool:
        return False

    @property
    def logout_available(self) -> bool:
        return False

    @property
    def auth_enabled(self) -> bool:
        return True

    def validate_security(self, app: Any, ssl_options: dict[str, Any] | None = None) -> None:
        if not self.hub_auth.api_token:
            raise InvalidSettingError(
                "the gateway needs JUPYTERHUB_API_TOKEN and JUPYTERHUB_API_URL: run it as a "
                "JupyterHub service (c.JupyterHub.services) or set them for an external one"
            )
        if not self.hub_auth.access_scopes:
            raise InvalidSettingError(
                "no access scope for the gateway: set JUPYTERHUB_SERVICE_NAME (the hub sets it "
                "for a managed service) or HubAuth.access_scopes"
            )
