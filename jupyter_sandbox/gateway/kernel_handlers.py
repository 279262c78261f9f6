"""The kernel gateway API as Jupyter Server's GatewayClient calls it, every kernel its owner's.

Routes (``jupyter_server.gateway.managers`` is the client): ``GET/POST /api/kernels``,
``GET/DELETE /api/kernels/{id}``, ``POST /api/kernels/{id}/{interrupt,restart}`` and the
WebSocket ``/api/kernels/{id}/channels``: jupyter_server's own handlers, with the owner checked
before any of them acts. A start takes ``{"name": …, "env": {…}}``, whose ``env`` is read by
kernel_env.py; the list answers the caller's kernels only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jupyter_client.jsonutil import json_default
from jupyter_server.auth.decorator import authorized
from jupyter_server.services.kernels import handlers as kernel_api
from jupyter_server.services.kernels.websocket import KernelWebsocketHandler as WebsocketBase
from jupyter_server.utils import url_escape, url_path_join
from tornado import web

from jupyter_sandbox.gateway.kernel_env import check_choices, checked_launch, user_root_of
from jupyter_sandbox.gateway.kernels import OwnedKernelManager
from jupyter_sandbox.kernel.kernel_request import WORKSPACE_ROOT_ENV_VAR
from jupyter_sandbox.protocol.errors import SandboxError
from jupyter_sandbox.protocol.requests import json_object
from jupyter_sandbox.server_extension.base import bound_body

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


@web.stream_request_body
class MainKernelHandler(OwnedKernelMixin, kernel_api.MainKernelHandler):
    """The caller's kernels, and a start: its body is read only once the request is
    authenticated, and only up to MAX_START_BODY (tornado would read up to the server's
    max_body_size first, for every hub user at once)."""

    async def prepare(self, *args: Any, **kwargs: Any) -> None:
        await super().prepare(*args, **kwargs)
        self._received = bytearray()
        if self.current_user is not None and self.request.method == "POST":
            bound_body(self, MAX_START_BODY)

    def data_received(self, chunk: bytes) -> None:
        if self.current_user is not None:  # an anonymous start is refused, its body unkept
            self._received += chunk

    @web.authenticated
    @authorized
    async def get(self) -> None:
        kernels = self.owned_kernels.kernels_of(self.owner)
        self.finish(json.dumps(kernels, default=json_default))

    @web.authenticated
    @authorized
    async def post(self) -> None:
        body = bytes(self._received)
        model = json_object(body, allow_empty=True, what="a kernel start {name, env}")
        name = model.get("name") or self.owned_kernels.default_kernel_name
        if not isinstance(name, str):
            raise web.HTTPError(400, "'name' must be a kernelspec's name")
        gateway = self.settings["sandbox_gateway"]
        root = user_root_of(gateway.user_root, self.owner)
        launch = await checked_launch(model.get("env"), self.owner, root)
        # What the kernel would refuse once started (a 201, then a kernel that dies): here,
        # as a 400 the user's server shows.
        check_choices(launch.env, self.settings["sandbox_extension"].manager.settings)
        per_user, total = gateway.kernel_caps()
        kernel_id = await self.owned_kernels.start_owned_kernel(
            self.owner, name, launch, max_per_owner=per_user, max_total=total
        )
        await gateway.user_pools.keep_warm(self.owner, Path(launch.env[WORKSPACE_ROOT_ENV_VAR]))
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
