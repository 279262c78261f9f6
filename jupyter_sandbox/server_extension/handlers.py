"""REST handlers under ``/api/sandboxes`` (documented in openapi.yaml, beside this file).

Every handler is ``@web.authenticated`` and ``@authorized`` (resource ``sandboxes``; the
terminal's WebSocket ``@ws_authenticated``, action "execute") and acts as the owner the extension
maps the current user to; another owner's sandbox is "not found". Core errors are raised as they
are and turned into JSON here, in one place: ``SandboxHandlerBase.write_error``.
"""

from __future__ import annotations

import datetime
import functools
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from jupyter_core.utils import ensure_async
from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler, JupyterHandler
from jupyter_server.utils import url_path_join
from tornado import web

from ..sandbox import SandboxError, SandboxManager
from ..sandbox.backend_records import SandboxInfo
from ..sandbox.container_spec import now_iso
from ..sandbox.contexts import kernel_attached
from ..sandbox.errors import SandboxConflictError
from ..sandbox.fair_share import current_owner
from ..sandbox.quotas import counts_toward_quota
from .models import sandbox_model
from .requests import CreateRequest, metadata_filter, timeout_request

if TYPE_CHECKING:
    from .app import SandboxExtension

log = logging.getLogger(__name__)

AUTH_RESOURCE = "sandboxes"
_ID = r"(?P<sandbox_id>[^/]+)"
F = TypeVar("F", bound=Callable[..., Any])


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
    def extension(self) -> SandboxExtension:
        return self.settings["sandbox_extension"]  # type: ignore[no-any-return]

    @property
    def manager(self) -> SandboxManager:
        return self.extension.manager

    @property
    def owner(self) -> str:
        return self.extension.owner_of(self.current_user)

    async def prepare(self, *args: Any, **kwargs: Any) -> None:
        """Who the request is for, once known, becomes the owner its engine calls and what it
        starts are counted to (sandbox/fair_share.py): every task it starts inherits that."""
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

    def model_of(self, info: SandboxInfo, state: dict[str, Any] | None = None) -> dict[str, Any]:
        return sandbox_model(self.manager, self.extension.culler, info, state)

    def set_deadline(self, sandbox_id: str, expires: datetime.datetime) -> None:
        """Record the sandbox's own timeout, and have the culler come by then."""
        self.manager.update_state(sandbox_id, expires=expires.isoformat())
        self.extension.culler.deadline_changed(expires)


class SandboxesHandler(SandboxAPIHandler):
    """``/api/sandboxes``: list the user's sandboxes (``?metadata=KEY=VALUE`` those with that
    entry), create one."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        wanted = metadata_filter(self.get_arguments("metadata")).items()
        models = []
        for info in await self.manager.list_sandboxes(self.owner):
            state = self.manager.read_state(info.sandbox_id)
            metadata = state.get("metadata") or {}
            if counts_toward_quota(state) and wanted <= metadata.items():
                models.append(self.model_of(info, state))
        self.write_json(models)

    @web.authenticated
    @authorized
    async def post(self) -> None:
        request = CreateRequest.parse(self.request.body)
        # Refused before anything starts; counted from this request.
        expires = None
        if request.timeout is not None:
            expires = self.extension.culler.expiry({}, request.timeout)
        if request.context is not None:
            existing = await self.manager.find_context(self.owner, request.context)
            if existing is not None:
                raise SandboxConflictError(
                    f"context '{request.context}' already has sandbox {existing.sandbox_id}: "
                    "use it, or delete it first"
                )
        # With a snapshot, its files are restored into the new sandbox (snapshot_handlers.py).
        create = (
            self.manager.create
            if request.snapshot is None
            else functools.partial(
                self.manager.snapshots.create_sandbox, snapshot_id=request.snapshot
            )
        )
        sandbox = await create(
            self.owner,
            runtime=request.runtime,
            image=request.image,
            limits=request.limits,
            environment=request.environment,
            context=request.context,
            purpose=self.extension.container_purpose,
            network=request.network,
        )
        if request.metadata:
            self.manager.update_state(sandbox.sandbox_id, metadata=request.metadata)
        if expires is not None:
            self.set_deadline(sandbox.sandbox_id, expires)
        location = url_path_join(self.base_url, "api/sandboxes", sandbox.sandbox_id)
        self.set_header("Location", location)
        self.write_json(self.model_of(sandbox.info), 201)


class SandboxHandler(SandboxAPIHandler):
    """``/api/sandboxes/{id}``: one sandbox; delete removes it and its files."""

    @web.authenticated
    @authorized
    async def get(self, sandbox_id: str) -> None:
        self.write_json(await self.model(sandbox_id))

    @web.authenticated
    @authorized
    async def delete(self, sandbox_id: str) -> None:
        await self.manager.get(self.owner, sandbox_id)  # another owner's: 404, not 204
        await self.manager.remove(self.owner, sandbox_id)
        self.set_status(204)
        self.finish()


class SandboxTimeoutHandler(SandboxAPIHandler):
    """``/api/sandboxes/{id}/timeout``: the sandbox goes ``timeout`` seconds from now (sooner or
    later than it would have), within the server's time to live."""

    @web.authenticated
    @authorized
    async def put(self, sandbox_id: str) -> None:
        timeout = timeout_request(self.request.body)
        info = await self.manager.get(self.owner, sandbox_id)
        state = self.manager.read_state(sandbox_id)
        self.set_deadline(sandbox_id, self.extension.culler.expiry(state, timeout))
        self.write_json(self.model_of(info))


class SandboxActionHandler(SandboxAPIHandler):
    """``/api/sandboxes/{id}/{pause,resume,restart}``: answers with the sandbox after it."""

    @web.authenticated
    @authorized
    async def post(self, sandbox_id: str, action: str) -> None:
        owner = self.owner
        if action == "pause":
            await self.manager.pause(owner, sandbox_id)
        elif action == "resume":
            await self.manager.resume(owner, sandbox_id)
        else:
            await self._restart(owner, sandbox_id)
        self.manager.update_state(sandbox_id, last_activity=now_iso())
        self.write_json(await self.model(sandbox_id))

    async def _restart(self, owner: str, sandbox_id: str) -> None:
        await self.manager.restartable(owner, sandbox_id)
        state = self.manager.read_state(sandbox_id)
        if not kernel_attached(self.manager.settings.state_path, state):
            await self.manager.restart_kernel(owner, sandbox_id)
            return
        kernel_id = state.get("kernel_id")
        if kernel_id and kernel_id in self.kernel_manager:
            # Restart the attached Jupyter kernel the way Lab does; its proxy restarts the
            # interpreter in the sandbox and reattaches.
            await ensure_async(self.kernel_manager.restart_kernel(kernel_id))  # type: ignore[no-untyped-call]
            return
        raise SandboxConflictError(
            f"sandbox {sandbox_id} is attached to a kernel of another process; restart that "
            "kernel from its own client"
        )


class SandboxStatsHandler(SandboxAPIHandler):
    """``/api/sandboxes/{id}/stats``: CPU, memory, pids and workspace bytes, measured now."""

    @web.authenticated
    @authorized
    async def get(self, sandbox_id: str) -> None:
        stats = await self.manager.stats(self.owner, sandbox_id)
        self.write_json(stats.as_dict())


class SandboxAttestationHandler(SandboxAPIHandler):
    """``/api/sandboxes/{id}/attestation``: what a probe inside the sandbox measured."""

    @web.authenticated
    @authorized
    async def get(self, sandbox_id: str) -> None:
        report = await self.manager.attestation(self.owner, sandbox_id)
        self.write_json(report.as_dict())


class SandboxFeaturesHandler(SandboxAPIHandler):
    """``/api/sandbox-features``: the optional routes this server has, by name, so that a
    client learns them with one 200 instead of probing each route (a probe of a missing route,
    or of the terminal's WebSocket by plain GET, is a red error in the browser's console)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.write_json({"features": list(server_features(default_handlers))})


#: The features a client may find missing on an older server (labextension/src/features.ts).
OPTIONAL_FEATURES = ("snapshots", "network", "files", "terminal", "commands", "ports")


def server_features(handlers: list[tuple[str, type[web.RequestHandler]]]) -> tuple[str, ...]:
    """The optional features whose routes are among ``handlers``: read off the routes
    themselves, so the answer cannot claim a route the server was built without."""
    patterns = [pattern for pattern, _ in handlers]
    return tuple(
        name
        for name in OPTIONAL_FEATURES
        if any(
            pattern.startswith((f"/api/{name}", f"/api/sandboxes/{_ID}/{name}"))
            for pattern in patterns
        )
    )


default_handlers: list[tuple[str, type[web.RequestHandler]]] = [
    (r"/api/sandbox-features/?", SandboxFeaturesHandler),
    (r"/api/sandboxes/?", SandboxesHandler),
    (rf"/api/sandboxes/{_ID}/?", SandboxHandler),
    (rf"/api/sandboxes/{_ID}/(?P<action>pause|resume|restart)/?", SandboxActionHandler),
    (rf"/api/sandboxes/{_ID}/timeout/?", SandboxTimeoutHandler),
    (rf"/api/sandboxes/{_ID}/stats/?", SandboxStatsHandler),
    (rf"/api/sandboxes/{_ID}/attestation/?", SandboxAttestationHandler),
]

# Routes of their own modules (which build on SandboxAPIHandler above, hence imported here).
from .background_handlers import background_handlers  # noqa: E402
from .code_handlers import code_handlers  # noqa: E402
from .command_handlers import command_handlers  # noqa: E402
from .file_handlers import file_handlers  # noqa: E402
from .network_handlers import network_handlers  # noqa: E402
from .port_handlers import port_handlers  # noqa: E402
from .snapshot_handlers import snapshot_handlers  # noqa: E402
from .terminal_handlers import terminal_handlers  # noqa: E402

default_handlers += [
    *network_handlers,
    *snapshot_handlers,
    *file_handlers,
    *command_handlers,
    *background_handlers,
    *code_handlers,
    *terminal_handlers,
    *port_handlers,
]
