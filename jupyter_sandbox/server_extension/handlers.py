"""REST handlers of the sandboxes themselves under ``/api/sandboxes`` (documented in
openapi.yaml, beside this file): list, create, get, delete, pause, resume, restart, timeout,
stats, attestation, and ``/api/sandbox-features``. What they share with every other handler
(authentication, the owner, errors as JSON) is in base.py; the other routes have modules of
their own (``*_handlers.py``), and app.py assembles them all.
"""

from __future__ import annotations

import dataclasses

from jupyter_core.utils import ensure_async
from jupyter_server.auth.decorator import authorized
from jupyter_server.utils import url_path_join
from tornado import web

from jupyter_sandbox.sandbox.host.clock import now_iso
from jupyter_sandbox.sandbox.host.state_record import SandboxState
from jupyter_sandbox.sandbox.lifecycle.quotas import counts_toward_quota
from jupyter_sandbox.sandbox.use_cases import create_sandbox, restart_sandbox, set_deadline
from jupyter_sandbox.server_extension.base import SANDBOX_ID, JsonBodyHandler, SandboxAPIHandler
from jupyter_sandbox.server_extension.requests import (
    CreateRequest,
    metadata_filter,
    timeout_request,
)


class SandboxesHandler(JsonBodyHandler):
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
        request = CreateRequest.parse(self.body)
        request = dataclasses.replace(request, purpose=self.extension.container_purpose)
        # What the request means (context, snapshot, metadata, deadline) is the use case's.
        sandbox = await create_sandbox(self.manager, self.owner, request, self.extension.culler)
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


class SandboxTimeoutHandler(JsonBodyHandler):
    """``/api/sandboxes/{id}/timeout``: the sandbox goes ``timeout`` seconds from now (sooner or
    later than it would have), within the server's time to live."""

    @web.authenticated
    @authorized
    async def put(self, sandbox_id: str) -> None:
        timeout = timeout_request(self.body)
        info = await self.manager.get(self.owner, sandbox_id)
        set_deadline(self.manager, sandbox_id, timeout, self.extension.culler)
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
            await restart_sandbox(self.manager, owner, sandbox_id, self._restart_attached)
        self.manager.update_state(sandbox_id, last_activity=now_iso())
        self.write_json(await self.model(sandbox_id))

    async def _restart_attached(self, state: SandboxState) -> bool:
        """Restart the attached Jupyter kernel the way Lab does, if this server runs it; its
        proxy restarts the interpreter in the sandbox and reattaches."""
        kernel_id = state.get("kernel_id")
        if not (kernel_id and kernel_id in self.kernel_manager):
            return False  # a kernel of another process
        await ensure_async(self.kernel_manager.restart_kernel(kernel_id))  # type: ignore[no-untyped-call]
        return True


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
        self.write_json({"features": list(self.extension.features)})


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
            pattern.startswith((f"/api/{name}", f"/api/sandboxes/{SANDBOX_ID}/{name}"))
            for pattern in patterns
        )
    )


# The sandboxes' own routes; app.py adds every other module's to them.
sandbox_handlers: list[tuple[str, type[web.RequestHandler]]] = [
    (r"/api/sandbox-features/?", SandboxFeaturesHandler),
    (r"/api/sandboxes/?", SandboxesHandler),
    (rf"/api/sandboxes/{SANDBOX_ID}/?", SandboxHandler),
    (rf"/api/sandboxes/{SANDBOX_ID}/(?P<action>pause|resume|restart)/?", SandboxActionHandler),
    (rf"/api/sandboxes/{SANDBOX_ID}/timeout/?", SandboxTimeoutHandler),
    (rf"/api/sandboxes/{SANDBOX_ID}/stats/?", SandboxStatsHandler),
    (rf"/api/sandboxes/{SANDBOX_ID}/attestation/?", SandboxAttestationHandler),
]
