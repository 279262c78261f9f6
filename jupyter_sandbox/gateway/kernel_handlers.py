"""The kernel gateway API as Jupyter Server's GatewayClient calls it, every kernel its owner's.

Routes (``jupyter_server.gateway.managers`` is the client): ``GET/POST /api/kernels``,
``GET/DELETE /api/kernels/{id}``, ``POST /api/kernels/{id}/{interrupt,restart}`` and the
WebSocket ``/api/kernels/{id}/channels``: jupyter_server's own handlers, with the owner checked
before any of them acts. A start takes ``{"name": …, "env": {…}}``, whose ``env`` is read by
kernel_env.py; the list answers the caller's kernels only.
"""

from __future__ import annotations

import json
from typing import Any

from jupyter_client.jsonutil import json_default
from jupyter_server.auth.decorator import authorized
from jupyter_server.services.kernels import handlers as kernel_api
from jupyter_server.services.kernels.websocket import KernelWebsocketHandler as WebsocketBase
from jupyter_server.utils import url_escape, url_path_join
from tornado import web

from jupyter_sandbox.gateway.kernel_env import kernel_launch, user_root_of, working_directory
from jupyter_sandbox.gateway.kernels import OwnedKernelManager
from jupyter_sandbox.protocol.errors import SandboxError

MAX_START_BODY = 1 << 20  # bytes: a name and a server's KERNEL_* variables


class OwnedKernelMixin:
    """Resolves the request's kernel id only for its owner; SandboxError as JSON."""

    @property
    def owned_kernels(self) -> OwnedKernelManager:
        return self.kernel_manager  # type: ignore[attr-defined,no-any-return]

    @property
    def owner(self) -> str:
        return str(self.current_user.username)  # type: ignore[attr-defined]

    async def prepare(self, *args: Any, **kwargs: Any) -> None:
        await super().prepare(*args, **kwargs)  # type: ignore[misc]
        kernel_id = self.path_kwargs.get("kernel_id")  # type: ignore[attr-defined]
        if kernel_id is not None and self.current_user is not None:  # type: ignore[attr-defined]
            try:
                self.owned_kernels.check_owner(kernel_id, self.owner)
            except SandboxError as exc:
                raise web.HTTPError(exc.http_status, exc.message) from None

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, SandboxError):
            self.set_status(exc.http_status)  # type: ignore[attr-defined]
            self.set_header("Content-Type", "application/json")  # type: ignore[attr-defined]
            self.finish(json.dumps(exc.to_dict()))  # type: ignore[attr-defined]
            return
        super().write_error(status_code, **kwargs)  # type: ignore[misc]


class MainKernelHandler(OwnedKernelMixin, kernel_api.MainKernelHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        kernels = self.owned_kernels.kernels_of(self.owner)
        self.finish(json.dumps(kernels, default=json_default))

    @web.authenticated
    @authorized
    async def post(self) -> None:
        if len(self.request.body) > MAX_START_BODY:
            raise web.HTTPError(413, f"a kernel start is at most {MAX_START_BODY} bytes")
        model = self.get_json_body() or {}
        if not isinstance(model, dict):
            raise web.HTTPError(400, "a kernel start is a JSON object: {name, env}")
        name = model.get("name") or self.owned_kernels.default_kernel_name
        if not isinstance(name, str):
            raise web.HTTPError(400, "'name' must be a kernelspec's name")
        gateway = self.settings["sandbox_gateway"]
        root = user_root_of(gateway.user_root, self.owner)
        launch = kernel_launch(model.get("env"), self.owner, root)
        kernel_id = await self.owned_kernels.start_owned_kernel(self.owner, name, launch)
        await gateway.user_pools.keep_warm(self.owner, working_directory(None, root))
        answer = self.owned_kernels.kernel_model(kernel_id)  # type: ignore[no-untyped-call]
        self.set_header(
            "Location", url_path_join(self.base_url, "api", "kernels", url_escape(kernel_id))
        )
        self.set_status(201)
        self.finish(json.dumps(answer, default=json_default))


class KernelHandler(OwnedKernelMixin, kernel_api.KernelHandler):
    pass


class KernelActionHandler(OwnedKernelMixin, kernel_api.KernelActionHandler):
    pass


class KernelWebsocketHandler(OwnedKernelMixin, WebsocketBase):
    pass


_KERNEL = r"(?P<kernel_id>\w+-\w+-\w+-\w+-\w+)"
default_handlers = [
    (r"/api/kernels", MainKernelHandler),
    (rf"/api/kernels/{_KERNEL}", KernelHandler),
    (rf"/api/kernels/{_KERNEL}/(?P<action>restart|interrupt)", KernelActionHandler),
    (rf"/api/kernels/{_KERNEL}/channels", KernelWebsocketHandler),
]
