"""``jupyter sandbox gateway``: the headless server that alone holds the container engine.

A Jupyter Server with only what a gateway serves: ``/api`` (status), ``/api/kernelspecs`` (one:
Sandboxed Python), ``/api/kernels`` and its WebSocket (kernel_handlers.py, every kernel its
hub user's) and the sandbox REST API (the server extension, whose owner is the request's hub
user). No contents, files, sessions or terminals on the host, no Lab, no login page: requests
carry hub-issued tokens (auth.py).

Run as a JupyterHub service, it takes its address and URL prefix from the hub
(``JUPYTERHUB_SERVICE_URL``, ``JUPYTERHUB_SERVICE_PREFIX``); every kernel runs in
``user_root``'s directory of its user (kernel_env.py). Each active user has a warm pool of
their own (pools.py), drained when the gateway stops.
"""

from __future__ import annotations

import os
import signal
from typing import Any
from urllib.parse import urlparse

from jupyter_server.base.handlers import APIVersionHandler, Template404, TrailingSlashHandler
from jupyter_server.kernelspecs.handlers import KernelSpecResourceHandler
from jupyter_server.serverapp import ServerApp
from jupyter_server.services.api.handlers import APISpecHandler, APIStatusHandler, IdentityHandler
from jupyter_server.services.kernelspecs.handlers import KernelSpecHandler, MainKernelSpecHandler
from traitlets import Integer, Unicode, default

from jupyter_sandbox.gateway.auth import HubTokenIdentityProvider
from jupyter_sandbox.gateway.kernels import SANDBOXED_PYTHON, OwnedKernelManager
from jupyter_sandbox.gateway.pools import UserPools
from jupyter_sandbox.protocol.errors import InvalidSettingError

# The server extension (the sandbox REST API and its manager), and nothing else the host's
# Jupyter configuration enables (Lab, terminals, language servers).
EXTENSIONS = {"jupyter_sandbox.server_extension": True}

# Kernels, when not configured: each is a process on the gateway's host, whose memory these
# bound (docs/how-to/jupyterhub-gateway.md).
DEFAULT_KERNELS = 100
DEFAULT_KERNELS_PER_USER = 10  # as SandboxQuotas.max_sandboxes's default

# Of jupyter_server's own routes, those a gateway serves. Its "api" and the contents manager
# bring others (/api/resolvePath, /files/…, /metrics) that would show the gateway host's files
# to every hub user: every route not ours nor here is dropped.
SERVED_ROUTES = (
    APIVersionHandler,
    APIStatusHandler,
    APISpecHandler,
    IdentityHandler,
    MainKernelSpecHandler,
    KernelSpecHandler,
    KernelSpecResourceHandler,
    TrailingSlashHandler,
    Template404,
)


class SandboxGateway(ServerApp):
    name = "jupyter-sandbox-gateway"
    description = "Serve hub users Sandboxed Python kernels and sandboxes (the kernel gateway API)."

    default_services = ("api", "kernelspecs")  # type: ignore[assignment]

    user_root = Unicode(
        "/home/{username}",
        config=True,
        help="""The directory (a path; {username} is the hub user's name) whose files a user's
        kernels see as /workspace: a kernel's working directory (KERNEL_WORKING_DIR, the
        notebook's directory on the user's server) must be inside it, symbolic links followed,
        or the start is refused. Without KERNEL_WORKING_DIR, the kernel starts in it.""",
    )

    max_kernels_per_user = Integer(
        None,
        allow_none=True,
        min=1,
        config=True,
        help="""Most kernels (a number) one hub user may have on the gateway at once, those
        whose sandbox failed to start included: each is a process on the gateway's host. A
        start beyond it is refused (429) until the user shuts one down. Unset: the owner's
        SandboxQuotas.max_sandboxes (each kernel holds one sandbox), or that setting's
        default when it is 0 (no limit).""",
    )
    max_kernels = Integer(
        DEFAULT_KERNELS,
        min=1,
        config=True,
        help="""Most kernels (a number) the gateway runs at once for all hub users together:
        each is a process on its host. A start beyond it is refused (429).""",
    )

    _user_pools: UserPools | None = None

    def kernel_caps(self) -> tuple[int, int]:
        """The most kernels one user may have, and all users together."""
        per_user = self.max_kernels_per_user
        if per_user is None:
            quotas = self.web_app.settings["sandbox_extension"].manager.quotas
            per_user = quotas.max_sandboxes or DEFAULT_KERNELS_PER_USER
        return per_user, self.max_kernels

    @property
    def user_pools(self) -> UserPools:
        """The warm pools of hub users, made on first use: the server extension that holds
        the sandbox manager is loaded after the web application is made."""
        if self._user_pools is None:
            extension = self.web_app.settings["sandbox_extension"]
            # Its settings from the extension's: jupyter_sandbox_config.py and the server's.
            self._user_pools = UserPools(
                extension.manager, extension.container_purpose or "warm-pool", parent=extension
            )
        return self._user_pools

    @default("extra_services")
    def _default_extra_services(self) -> list[str]:
        return ["jupyter_sandbox.gateway.kernel_handlers"]

    @default("kernel_manager_class")
    def _default_kernel_manager_class(self) -> type[OwnedKernelManager]:
        return OwnedKernelManager

    @default("identity_provider_class")
    def _default_identity_provider_class(self) -> type[HubTokenIdentityProvider]:
        return HubTokenIdentityProvider

    @default("terminals_enabled")
    def _default_terminals_enabled(self) -> bool:
        return False

    @default("allow_root")
    def _default_allow_root(self) -> bool:
        # Whoever holds the engine's socket is root's equal already; the gateway runs no user
        # code on the host (every kernel's code runs in its sandbox), which is what the warning
        # about root is for.
        return True

    @default("open_browser")
    def _default_open_browser(self) -> bool:
        return False

    @default("ip")
    def _default_ip(self) -> str:
        return urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL", "")).hostname or "127.0.0.1"

    @default("port")
    def _default_port(self) -> int:
        return urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL", "")).port or 8890

    @default("base_url")
    def _default_base_url(self) -> str:
        return os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/")

    def init_server_extensions(self) -> None:
        if "SandboxSettings" in self.cli_config:
            # The kernels would not see them: they read jupyter_sandbox_config.py only.
            raise InvalidSettingError(
                "SandboxSettings on the gateway's command line would not reach its kernels: "
                "put them in a jupyter_sandbox_config.py on its config path (JUPYTER_CONFIG_DIR)"
            )
        # Fixed, not defaults: what makes this a gateway, whatever a config file says. Here,
        # after the config files and before the extension takes its config from ours.
        self.config.KernelSpecManager.allowed_kernelspecs = {SANDBOXED_PYTHON}
        self.config.MappingKernelManager.default_kernel_name = SANDBOXED_PYTHON
        self.config.SandboxExtension.owner_source = "identity"
        # The extension's own pool would be the gateway's owner's (root's), who starts no
        # kernel here: hub users' pools are UserPools (pools.py), sized by UserPools.size.
        self.config.WarmPool.size = 0
        self.jpserver_extensions = dict(EXTENSIONS)
        super().init_server_extensions()

    def init_webapp(self) -> None:
        self.tornado_settings = {**self.tornado_settings, "sandbox_gateway": self}
        super().init_webapp()
        rules = self.web_app.wildcard_router.rules
        rules[:] = [rule for rule in rules if _served(rule.target)]

    def init_signal(self) -> None:
        super().init_signal()
        # JupyterHub stops a service with SIGINT first (then SIGTERM, then SIGKILL). Without a
        # terminal, Jupyter Server takes SIGINT for an interrupt that skips its clean-up, which
        # would leave the kernels and the pools' members: here it is a stop, as JupyterHub
        # makes it for its single-user servers.
        signal.signal(signal.SIGINT, self._signal_stop)

    async def cleanup_extensions(self) -> None:
        # Before the extension closes the sandbox manager the pools remove members with.
        if self._user_pools is not None:
            await self._user_pools.drain()
        await super().cleanup_extensions()


def _served(target: Any) -> bool:
    return target in SERVED_ROUTES or getattr(target, "__module__", "").startswith(
        "jupyter_sandbox."
    )


main = SandboxGateway.launch_instance
