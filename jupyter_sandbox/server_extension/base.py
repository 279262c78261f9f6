"""What every handler of the sandbox API shares, REST or WebSocket, this package's and the E2B
API's (e2b_api/): the owner a request acts as, the extension's services, and the answer to an
error. Every handler module imports this one and no other handler module; the app (app.py)
assembles their routes, so that no handler module imports the route table or the app.

Every handler is ``@web.authenticated`` and ``@authorized`` (resource ``sandboxes``; the
terminal's WebSocket ``@ws_authenticated``, action "execute") and acts as the owner the extension
maps the current user to; another owner's sandbox is "not found". Core errors are raised as they
are and turned into JSON here, in one place: ``SandboxHandlerBase.write_error``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from http.client import responses
from typing import Any, Protocol, TypeVar

from jupyter_server.auth.decorator import authorized
from jupyter_server.auth.identity import User
from jupyter_server.base.handlers import APIHandler, JupyterHandler
from tornado import web

from jupyter_sandbox.protocol.errors import SandboxError
from jupyter_sandbox.sandbox.backends.records import SandboxInfo
from jupyter_sandbox.sandbox.host.fair_share import FairShare, OwnerCap, current_owner
from jupyter_sandbox.sandbox.host.state_record import SandboxState
from jupyter_sandbox.sandbox.lifecycle.culler import SandboxCuller
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.server_extension.models import sandbox_model
from jupyter_sandbox.server_extension.port_links import PortLinks

log = logging.getLogger(__name__)

AUTH_RESOURCE = "sandboxes"
# A route's sandbox id, as every module's routes capture it.
SANDBOX_ID = r"(?P<sandbox_id>[^/]+)"
F = TypeVar("F", bound=Callable[..., Any])


class ExtensionServices(Protocol):
    """What the handlers use of the server extension (app.py's SandboxExtension, which puts
    itself in the tornado settings as ``sandbox_extension`` and is checked there to be one):
    named here so that no handler module imports the app, which imports them all."""

    manager: SandboxManager
    culler: SandboxCuller
    archive_jobs: FairShare
    uploads: FairShare
    event_streams: OwnerCap
    port_links: PortLinks

    @property
    def container_purpose(self) -> str: ...
    @property
    def max_event_streams(self) -> int: ...
    @property
    def max_event_streams_per_owner(self) -> int: ...
    @property
    def features(self) -> tuple[str, ...]: ...

    def owner_of(self, user: User) -> str: ...


def authorized_to_execute(method: F) -> F:
    """``@authorized`` for the action "execute" on "sandboxes": what runs something in a
    sandbox (a command, code in its interpreter, a terminal), as Jupyter asks "execute" of
    its own kernels and terminals; everything else maps its HTTP method (read, write). Its own
    typing loses the method's when it is given an action."""
    decorate: Callable[[F], F] = authorized("execute", resource=AUTH_RESOURCE)
    return decorate(method)


class SandboxHandlerBase(JupyterHandler):
    """What every handler of this API shares, REST or WebSocket (terminal_handlers.py): the
    manager, the owner of the request, and SandboxError as JSON."""

    auth_resource = AUTH_RESOURCE

    @property
    def extension(self) -> ExtensionServices:
        return self.settings["sandbox_extension"]  # type: ignore[no-any-return]

    @property
    def manager(self) -> SandboxManager:
        return self.extension.manager

    @property
    def owner(self) -> str:
        return self.extension.owner_of(self.current_user)

    async def prepare(self, *args: Any, **kwargs: Any) -> None:
        """Who the request is for, once known, becomes the owner its engine calls and what it
        starts are counted to (sandbox/host/fair_share.py): every task it starts inherits that."""
        await super().prepare(*args, **kwargs)
        if self.current_user is not None:
            current_owner.set(self.owner)

    def write_json(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(data))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        if status_code == 405:  # RFC 9110: a 405 names the methods the route has
            self.set_header("Allow", ", ".join(self.allowed_methods()))
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, SandboxError):
            self.write_json(exc.to_dict(), exc.http_status)
            return
        super().write_error(status_code, **kwargs)

    def write_error_json(self, status_code: int, exc: BaseException | None) -> None:
        """An error that is no SandboxError, as JSON like the REST routes' (``{"message"}``,
        the HTTPError's message or the status's name), rather than Jupyter's HTML error page:
        for the WebSocket routes, whose refusals come before the upgrade."""
        message = responses.get(status_code, "error")
        if isinstance(exc, web.HTTPError) and exc.log_message:
            message = exc.log_message
        self.write_json({"message": message}, status_code)

    def allowed_methods(self) -> list[str]:
        """The HTTP methods this route's handler defines (tornado's base answers 405 to the
        others), OPTIONS included: Jupyter's API handlers answer it (CORS preflight)."""
        return [
            method
            for method in self.SUPPORTED_METHODS
            if getattr(type(self), method.lower(), None)
            is not getattr(web.RequestHandler, method.lower(), None)
        ]

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        if isinstance(value, SandboxError):  # expected: the client gets the message
            log.info(
                "%s %s: %s (%s)", self.request.method, self.request.path, value.code, value.message
            )
            return
        super().log_exception(typ, value, tb)


class SandboxAPIHandler(SandboxHandlerBase, APIHandler):
    """Base of the REST handlers: other errors are JSON too (APIHandler's)."""

    async def model(self, sandbox_id: str) -> dict[str, Any]:
        info = await self.manager.get(self.owner, sandbox_id)
        return self.model_of(info)

    def finish(self, *args: Any, **kwargs: Any) -> Any:
        """APIHandler's finish, but an answer that set its own Content-Type keeps it: that
        finish sets application/json on every answer, which made a file's bytes (and an empty
        snapshot archive) JSON to the client. tornado's own default (text/html, set by clear)
        is no choice of ours: it still becomes JSON."""
        chosen = self._headers.get("Content-Type", "")
        if "set_content_type" not in kwargs and chosen and not chosen.startswith("text/html"):
            kwargs["set_content_type"] = chosen
        return super().finish(*args, **kwargs)

    def model_of(self, info: SandboxInfo, state: SandboxState | None = None) -> dict[str, Any]:
        return sandbox_model(self.manager, self.extension.culler, info, state)
