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

import asyncio
import json
import logging
from collections.abc import Callable
from http.client import responses
from typing import Any, Protocol, TypeVar

from jupyter_server.auth.decorator import authorized
from jupyter_server.auth.identity import User
from jupyter_server.base.handlers import APIHandler, JupyterHandler
from tornado import web
from tornado.http1connection import HTTP1Connection

from jupyter_sandbox.protocol.errors import (
    InvalidRequestError,
    RequestTooLargeError,
    SandboxError,
)
from jupyter_sandbox.protocol.requests import MAX_JSON_BODY, json_object
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
    downloads: FairShare
    event_streams: OwnerCap
    port_relays: OwnerCap
    port_links: PortLinks

    @property
    def container_purpose(self) -> str: ...
    @property
    def max_event_streams(self) -> int: ...
    @property
    def max_event_streams_per_owner(self) -> int: ...
    @property
    def max_port_relays(self) -> int: ...
    @property
    def max_port_relays_per_owner(self) -> int: ...
    @property
    def port_relay_idle_timeout(self) -> float: ...
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

    def query_argument(self, name: str, default: str | None = None) -> str | None:
        """The query argument ``name`` exactly as sent (``default`` without it), given once,
        as UTF-8; a 400 otherwise. tornado's get_argument keeps the last of several values and
        strips spaces, so ``?offset=0&offset=100`` read from 100 and a name that began with a
        space named another file."""
        given = self.request.query_arguments.get(name, [])
        if len(given) > 1:
            raise InvalidRequestError(
                f"the query argument {name} is given {len(given)} times: give it once"
            )
        if not given:
            return default
        try:
            return given[0].decode()
        except UnicodeDecodeError:
            raise InvalidRequestError(
                f"the query argument {name} is not UTF-8: percent-encode its UTF-8 bytes"
            ) from None

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


def bound_body(handler: web.RequestHandler, max_bytes: int, advice: str = "") -> int | None:
    """For a ``stream_request_body`` handler's prepare: refuse the request by its declared
    Content-Length (RequestTooLargeError, 413; ``advice`` says what to do instead) when it is
    over ``max_bytes``, and have tornado refuse a body without one as it passes them. The
    declared length, or None (none, or not ASCII digits: tornado refuses the latter)."""
    request = handler.request
    declared = request.headers.get("Content-Length", "")
    length = int(declared) if declared.isascii() and declared.isdigit() else None
    if length is not None and length > max_bytes:
        raise RequestTooLargeError(
            f"{request.method} {request.path} takes a body of at most {max_bytes} bytes, not "
            f"{length}{advice}"
        )
    server_cap = getattr(handler.settings.get("serverapp"), "max_body_size", 0)
    if isinstance(request.connection, HTTP1Connection):  # a chunked body too
        request.connection.set_max_body_size(min(max_bytes, server_cap or max_bytes))
    return length


class TurnHoldingHandler(SandboxHandlerBase):
    """A request that waits for one of its owner's turns of a FairShare (an upload's, an
    archive's) before its body is read, and holds it while the body comes and is used: given
    back by :meth:`give_back_turn` once used, and whatever else ends the request, the client
    leaving while it still waited included."""

    _turn: tuple[FairShare, str] | None = None
    _client_left = False

    @property
    def holding_turn(self) -> bool:
        return self._turn is not None

    async def take_turn(self, share: FairShare) -> bool:
        """Wait for a turn of ``share`` for the request's owner; False when the client left
        meanwhile (the turn is then given back at once, to the next waiting)."""
        owner = await share.acquire(self.owner)
        self._turn = (share, owner)
        if self._client_left:
            self.give_back_turn()
            return False
        return True

    def give_back_turn(self) -> None:
        if self._turn is not None:
            share, owner = self._turn
            self._turn = None
            share.release(owner)

    def on_finish(self) -> None:
        self.give_back_turn()  # whatever ended the request: an error, a refusal
        super().on_finish()

    def on_connection_close(self) -> None:
        self._client_left = True
        self.give_back_turn()  # the client left, maybe before its whole body came
        super().on_connection_close()


@web.stream_request_body
class JsonBodyHandler(TurnHoldingHandler, SandboxAPIHandler):
    """Base of the REST routes whose body is a JSON object: the body is read only once the
    request is authenticated, at most :attr:`max_body_bytes` of it, and parsed without holding
    the event loop every owner shares.

    Read as tornado reads by default, a body of up to the server's max_body_size (Jupyter
    Server's is 512 MiB) was held whole before anything looked at it, and json's C scanner then
    held the loop while it parsed it, seconds for a body of many small values. Here a body
    over its route's bound is refused by its Content-Length before a byte is read (or by
    tornado as it passes the bound); one within MAX_JSON_BODY is parsed at once, which takes
    little; a larger one, which only routes that carry data allow (a command's stdin, a run's
    code), is received in one of its owner's upload turns (``SandboxExtension.uploads``, the
    file uploads' turns) and parsed in a thread by json's Python scanner, which leaves the loop
    its turns (protocol/strict_json.py, loads_in_steps).
    """

    # Bytes of this route's body, at most; a route that carries data sets its own.
    max_body_bytes = MAX_JSON_BODY

    async def prepare(self, *args: Any, **kwargs: Any) -> None:
        await super().prepare(*args, **kwargs)
        self._received = bytearray()
        self._keeping = self.current_user is not None  # an anonymous body is refused unkept
        if self.request.method not in ("POST", "PUT", "PATCH"):
            return
        # An anonymous body too: its refusal (the method's, once the body has come, so that a
        # client still writing it reads the answer rather than a reset) waits no longer.
        declared = bound_body(self, self.max_body_bytes, self.too_large_advice)
        if self._keeping and (declared is None or declared > MAX_JSON_BODY):
            await self.take_turn(self.extension.uploads)

    # What to do instead, after the refusal of a body past the route's bound.
    too_large_advice = ""

    def data_received(self, chunk: bytes) -> None:
        if self._keeping:
            self._received += chunk

    @property
    def body(self) -> bytes:
        """The request's body, as received."""
        return bytes(self._received)

    async def json_body(self, *, allow_empty: bool = False) -> dict[str, Any]:
        """The body as a JSON object (protocol/requests.py, json_object), parsed in a thread
        with the Python scanner when larger than MAX_JSON_BODY."""
        body, self._received = bytes(self._received), bytearray()
        try:
            if len(body) <= MAX_JSON_BODY:
                return json_object(body, allow_empty=allow_empty)
            return await asyncio.to_thread(
                json_object,
                body,
                allow_empty=allow_empty,
                max_bytes=self.max_body_bytes,
                in_steps=True,
            )
        finally:
            self.give_back_turn()
