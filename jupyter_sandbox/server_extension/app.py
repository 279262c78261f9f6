"""SandboxExtension: builds the sandbox manager, the culler and the pool, and mounts the API.

Who calls what, and when (jupyter_server's ExtensionApp life cycle):

* ``initialize_settings`` (server start, before its event loop runs): build the manager from the
  shared configuration (``jupyter_sandbox_config.py`` and the server's own config) and put it in
  the tornado settings for the handlers.
* ``_start_jupyter_server_extension`` (once the event loop runs): start the culler (whose
  first pass reaps what a previous server left behind), the warm pool's refill loop, and the
  zygote that forks proxy kernels (fast_start.py).
* ``stop_extension`` (server shutdown): stop the zygote and the culler, drain the pool, close
  the manager: its open terminals (their shells killed), then the engine client.

The pool is kept for the owner this server's kernels run as (``default_owner``), with the
server's root directory as the launch directory of its default key; notebooks opened in other
directories get warm sandboxes of their own from the second kernel on (pool.py, wanted keys).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import zmq
from jupyter_server.auth.identity import IdentityProvider, PasswordIdentityProvider, User
from jupyter_server.extension.application import ExtensionApp
from tornado import web
from traitlets import Bool, Enum, Float, Integer, Unicode

from jupyter_sandbox.e2b_api.routes import e2b_handlers
from jupyter_sandbox.protocol.errors import SandboxError
from jupyter_sandbox.sandbox.doctor import outdated_runtimes
from jupyter_sandbox.sandbox.host.fair_share import FairShare, OwnerCap
from jupyter_sandbox.sandbox.lifecycle.culler import SandboxCuller
from jupyter_sandbox.sandbox.lifecycle.pool_filler import WarmPool
from jupyter_sandbox.sandbox.manager import SandboxManager, default_owner
from jupyter_sandbox.sandbox.settings import load_config, settings_kernels_miss
from jupyter_sandbox.server_extension.background_handlers import background_handlers
from jupyter_sandbox.server_extension.base import ExtensionServices
from jupyter_sandbox.server_extension.code_handlers import code_handlers
from jupyter_sandbox.server_extension.command_handlers import command_handlers
from jupyter_sandbox.server_extension.credential_handlers import credential_handlers
from jupyter_sandbox.server_extension.fast_start import Zygote
from jupyter_sandbox.server_extension.file_handlers import file_handlers
from jupyter_sandbox.server_extension.gateway_forwarding import forwarding_handlers
from jupyter_sandbox.server_extension.gateway_stop import stop_on_sigint, stop_without_gateway
from jupyter_sandbox.server_extension.gateway_websocket import (
    gateway_websocket_handlers,
    relay_kernels_as_they_are,
)
from jupyter_sandbox.server_extension.handlers import sandbox_handlers, server_features
from jupyter_sandbox.server_extension.kernel_websocket import send_kernel_messages_at_once
from jupyter_sandbox.server_extension.network_handlers import network_handlers
from jupyter_sandbox.server_extension.notebook_trust import distrust_sandboxed_notebooks
from jupyter_sandbox.server_extension.port_handlers import port_handlers
from jupyter_sandbox.server_extension.port_links import PortLinks
from jupyter_sandbox.server_extension.server_log import join_server_log
from jupyter_sandbox.server_extension.snapshot_handlers import snapshot_handlers
from jupyter_sandbox.server_extension.terminal_handlers import terminal_handlers

# jupyter_server's own identity providers only know anonymous token users, whose names are
# random per browser: sandboxes must not change owner when the user opens a new browser.
_ANONYMOUS_IDENTITIES = (IdentityProvider, PasswordIdentityProvider)

# The REST API's routes, every handler module's, assembled here (as jupyter_server_terminals
# does) so that no handler module imports another's: handlers.py's own first, then the others.
default_handlers: list[tuple[str, type[web.RequestHandler]]] = [
    *sandbox_handlers,
    *network_handlers,
    *snapshot_handlers,
    *file_handlers,
    *command_handlers,
    *background_handlers,
    *code_handlers,
    *terminal_handlers,
    *port_handlers,
    *credential_handlers,
]


class SandboxExtension(ExtensionApp):
    """REST API for sandboxes, plus their culling, under ``/api/sandboxes``."""

    name = "jupyter_sandbox"
    # What GET /api/sandbox-features answers: read off the routes this server mounts.
    features = server_features(default_handlers)
    # Reads the same file the kernel process reads, so one file configures both.
    config_file_name = "jupyter_sandbox_config"

    owner_source = Enum(
        ["auto", "server", "identity"],
        default_value="auto",
        config=True,
        help="""Whose sandboxes a request sees. 'server': the owner of this server
        (JUPYTER_SANDBOX_OWNER, else JUPYTERHUB_USER, else the OS user), the same owner the
        kernels this server starts use. 'identity': the user name from the server's identity
        provider (a server shared by several named users). 'auto': 'server' for a JupyterHub
        single-user server (JUPYTERHUB_USER set, requests authenticated by the hub's identity
        provider: the hub has let the request into this user's server, as for its files and
        kernels, so an admin or a user it is shared with acts as its owner), and for
        jupyter_server's own anonymous or password login; 'identity' for any other identity
        provider with real user names (a custom one).""",
    )

    trust_sandboxed_notebooks = Bool(
        False,
        config=True,
        help="""Whether the server may trust a notebook of a sandboxed kernel as it trusts others
        (by its signature, signing what the user saves). Off: never, so JupyterLab does not run
        the scripts in such a notebook's outputs as it opens (notebook_trust.py; the JupyterLab
        extension keeps them untrusted as they are made, unless its trustSandboxedOutputs
        setting is on). Turn on only for sandboxed code you would run on the host.""",
    )

    container_purpose = Unicode(
        "",
        config=True,
        help="""A note recorded on every container this server creates (label
        io.jupyter-sandbox.purpose), e.g. the deployment's name; the test suite uses it to find
        what each test made.""",
    )

    fast_kernel_start = Bool(
        True,
        config=True,
        help="""Start Sandboxed Python kernels by forking them from a zygote process that has
        already imported the proxy kernel, which saves those imports at every kernel start. The
        zygote runs as the server's user, listens on a 0600 Unix socket in the state directory and
        serves only that user. False: every kernel starts as a new Python process.""",
    )

    kernel_reconnect_interval = Float(
        0.01,
        config=True,
        help="""Seconds between the server's attempts to connect its ZMQ sockets to a kernel that
        is not listening yet (ZMQ's RECONNECT_IVL for the server's kernel connections, backing
        off to 1 s; it applies to every kernel of this server). With ZMQ's default of 0.1 s a
        kernel that binds a moment after the server connects waits up to 0.1 s more to be
        reached; a forked Sandboxed Python kernel binds soon after it is launched. 0 leaves
        ZMQ's default.""",
    )

    max_event_streams = Integer(
        256,
        min=0,
        config=True,
        help="""Most event streams (a count: streamed commands, code runs whether streamed or
        not, followed output, directory watches) this server sends at once, all owners together
        (0: no cap).""",
    )
    max_event_streams_per_owner = Integer(
        16,
        min=0,
        config=True,
        help="""Most event streams (a count) one owner has open at once (0: no cap), so that
        one owner cannot take every stream of a shared server; past it a new one answers 429.""",
    )

    max_port_relays = Integer(
        512,
        min=0,
        config=True,
        help="""Most connections (a count: HTTP requests and WebSockets) this server relays
        through port links into sandboxes at once, all owners together (0: no cap). Each holds
        two of the server's file descriptors while it lasts.""",
    )
    max_port_relays_per_owner = Integer(
        64,
        min=0,
        config=True,
        help="""Most connections (a count) relayed at once through the port links of one
        owner's sandboxes, whoever holds the links (0: no cap); past it a new one answers 429.""",
    )
    port_relay_idle_timeout = Float(
        300.0,
        min=0.0,
        config=True,
        help="""Seconds an HTTP request relayed through a port link may move nothing, neither
        its body to the sandbox's server nor the answer to the browser, before the relay is
        closed and both its connections with it (0: no limit). WebSockets are not timed: a
        quiet one lasts until a side closes it, and counts against max_port_relays.""",
    )

    max_archive_jobs = Integer(
        4,
        min=1,
        config=True,
        help="""Most snapshot requests that move or scan an archive (a count: persist, import,
        restore) this server runs at once, all owners together; more wait their turn. Their
        scans and copies run on the server's default thread pool, which Jupyter's own contents
        requests use too.""",
    )
    max_archive_jobs_per_owner = Integer(
        2,
        min=1,
        config=True,
        help="""Most of max_archive_jobs (a count) one owner's requests run at once; a free
        turn goes to the owner running fewest.""",
    )

    max_uploads = Integer(
        16,
        min=1,
        config=True,
        help="""Most file uploads (a count: PUT .../files/content) this server writes into
        sandboxes at once, all owners together; more wait their turn.""",
    )
    max_uploads_per_owner = Integer(
        2,
        min=1,
        config=True,
        help="""Most of max_uploads (a count) one owner's uploads take at once; a free turn
        goes to the owner writing fewest, so one owner's many uploads do not slow another's
        requests more than a few would.""",
    )
    max_downloads = Integer(
        16,
        min=1,
        config=True,
        help="""Most file downloads (a count: GET .../files/content, and E2B's file reads) this
        server streams out of sandboxes at once, all owners together; more wait their turn.
        Each holds one of the engine's threads while its client takes the bytes.""",
    )
    max_downloads_per_owner = Integer(
        2,
        min=1,
        config=True,
        help="""Most of max_downloads (a count) one owner's downloads take at once; a free
        turn goes to the owner reading fewest, so one owner's downloads, however slowly its
        clients take them, do not slow another's.""",
    )

    forward_to_gateway = Bool(
        True,
        config=True,
        help="""When this server's kernels are a gateway's (GatewayClient.url set, as under the
        sandbox gateway), send every sandbox request (/api/sandboxes, /api/snapshots) on to
        that gateway with the server's gateway token, instead of answering it from an engine
        of its own. False: answer them here.""",
    )

    relay_gateway_kernels = Bool(
        True,
        config=True,
        help="""When this server's kernels are a gateway's (GatewayClient.url set), relay their
        WebSockets with this extension's connection (server_extension/gateway_websocket.py):
        messages with binary buffers pass, and the client and the gateway speak the same
        protocol, JupyterLab's binary one where both can. False: Jupyter Server's own gateway
        connection, which ends a kernel's relay at its first message with binary buffers.""",
    )

    kernel_websocket_nodelay = Bool(
        True,
        config=True,
        help="""Send every kernel WebSocket message of this server at once (TCP_NODELAY), not
        after the client acknowledged the one before: without it each execution's reply waits
        for the client's delayed acknowledgement (server_extension/kernel_websocket.py). All the
        server's kernels, Sandboxed Python's or not, and a gateway client's relay too.""",
    )

    def _warn_of_settings_kernels_miss(self) -> None:
        """A setting the kernels read, given only on the server's command line or in
        jupyter_server_config.py, applies to the server's own sandboxes (REST, the warm pool)
        and to no notebook's kernel: said at start, rather than found as two limits."""
        missed = settings_kernels_miss(self.config, load_config())
        if missed:
            self.log.warning(
                "%s set for the server only (its command line or jupyter_server_config.py): "
                "Sandboxed Python kernels read jupyter_sandbox_config.py alone, so the server's "
                "own sandboxes have it and notebooks' kernels do not; put it in "
                "jupyter_sandbox_config.py (docs/reference/config.md)",
                ", ".join(f"c.{name}" for name in missed),
            )

    def initialize_settings(self) -> None:
        join_server_log(self.serverapp.log if self.serverapp else self.log)
        self._warn_of_settings_kernels_miss()
        # self.config holds jupyter_sandbox_config.py (config_file_name) and the server's config.
        self.manager = SandboxManager.from_config(self.config)
        # Turns of the snapshot requests that move or scan archives (snapshot_handlers.py).
        self.archive_jobs = FairShare(self.max_archive_jobs, self.max_archive_jobs_per_owner)
        # The same turns for the core, whatever asks for a restore (a new sandbox from one too).
        self.manager.snapshots.archive_turns = self.archive_jobs
        # Turns of the file uploads into sandboxes (file_handlers.py).
        self.uploads = FairShare(self.max_uploads, self.max_uploads_per_owner)
        # Turns of the file downloads out of sandboxes (file_handlers.py, e2b_api/data_plane.py).
        self.downloads = FairShare(self.max_downloads, self.max_downloads_per_owner)
        # Event streams open now, by owner (event_stream.py).
        self.event_streams = OwnerCap(
            "event streams and code runs",
            "SandboxExtension.max_event_streams_per_owner",
            "SandboxExtension.max_event_streams",
        )
        # Connections relayed through port links now, by the sandbox's owner (port_handlers.py).
        self.port_relays = OwnerCap(
            "connections through port links",
            "SandboxExtension.max_port_relays_per_owner",
            "SandboxExtension.max_port_relays",
        )
        self.culler = SandboxCuller(self.manager, parent=self)
        root_dir = self.serverapp.root_dir if self.serverapp else None
        self.pool = WarmPool(
            self.manager,
            default_owner(),
            launch_dir=root_dir,
            purpose=self.container_purpose or "warm-pool",
            parent=self,
        )
        self._tasks: list[asyncio.Task[None]] = []
        self.zygote: Zygote | None = None
        # Links to sandboxes' ports stay good across restarts: their key is in the state dir.
        self.port_links = PortLinks.in_state_directory(self.manager.settings.state_path)
        if self.relay_gateway_kernels:  # self.settings: the web app's, copied back after this
            relay_kernels_as_they_are(self.settings)
        if self.kernel_websocket_nodelay:  # and wrapped in its turn
            send_kernel_messages_at_once(self.settings)
        services: ExtensionServices = self  # what the handlers take it for (base.py)
        self.settings["sandbox_extension"] = services
        if self.serverapp and not self.trust_sandboxed_notebooks:
            distrust_sandboxed_notebooks(
                self.serverapp.contents_manager, self.serverapp.kernel_spec_manager
            )

    def _forwarding_to_gateway(self) -> bool:
        """Whether this server sends its sandbox requests on to its kernels' gateway."""
        return self.forward_to_gateway and _kernels_at_gateway(self.serverapp)

    def initialize_handlers(self) -> None:
        if self._forwarding_to_gateway():
            # The gateway holds this user's sandboxes. Its terminal WebSockets first: the
            # forwarding route takes every other path under /api/sandboxes.
            self.handlers.extend(gateway_websocket_handlers)
            self.handlers.extend(forwarding_handlers)
            return
        self.handlers.extend(default_handlers)
        # The E2B-compatible API (issue 34), on the same core calls as the routes above.
        self.handlers.extend(e2b_handlers)

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        self._tune_kernel_connections(serverapp)
        if _kernels_at_gateway(serverapp):
            stop_on_sigint(serverapp)
            stop_without_gateway(serverapp)
            # Its kernels start at the gateway, from the gateway's pool: a zygote or a warm pool
            # here would only hold sandboxes of an engine no kernel of this server uses.
            self.log.info("warm pool and fast kernel start: at the gateway (GatewayClient.url)")
        else:
            if self.fast_kernel_start and self.zygote is None:
                zygote = Zygote(self.manager.settings.state_path, self.log)
                if zygote.start():
                    self.zygote = zygote
            if not await self.pool.start():
                self.log.info(
                    "warm pool: off (size 0) or kept warm by another process of this owner"
                )
        if self._forwarding_to_gateway():
            return  # the gateway holds this user's sandboxes, and culls them
        self._tasks.append(asyncio.ensure_future(self.culler.run()))
        self._tasks.append(asyncio.ensure_future(self._warn_about_outdated_runtimes()))

    async def _warn_about_outdated_runtimes(self) -> None:
        """Say at start, in the server's log, what 'jupyter sandbox doctor' would warn about
        the engine's age (checklist row 39, docs/explanation/design.md): an operator may never run
        the doctor."""
        try:
            facts = await self.manager.backend.engine_facts()
        except SandboxError as exc:
            self.log.warning("sandboxes cannot start here yet: %s", exc.message)
            return
        for check in await asyncio.to_thread(outdated_runtimes, facts.version):
            self.log.warning("sandbox isolation: %s; %s", check.detail, check.fix)

    def _tune_kernel_connections(self, serverapp: Any) -> None:
        # The kernel manager shares one context among its kernels (MultiKernelManager
        # .shared_context): context options are the defaults of every socket made after this.
        context = getattr(serverapp.kernel_manager, "context", None)
        if self.kernel_reconnect_interval and isinstance(context, zmq.Context):
            context.setsockopt(
                zmq.RECONNECT_IVL, max(1, int(self.kernel_reconnect_interval * 1000))
            )
            context.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)

    async def stop_extension(self) -> None:
        if self.zygote is not None:
            await self.zygote.stop()
            self.zygote = None
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        try:
            drained = await self.pool.drain()
            self.log.info("warm pool drained: %d sandbox(es) removed", len(drained))
        finally:
            await self.manager.close()

    def owner_of(self, user: User) -> str:
        """The sandbox owner a request by ``user`` acts as (see ``owner_source``)."""
        source = self.owner_source
        if source == "auto":
            provider = self.serverapp.identity_provider if self.serverapp else None
            anonymous = type(provider) in _ANONYMOUS_IDENTITIES
            hub = _is_hub_single_user_server(self.serverapp)
            source = "server" if anonymous or hub else "identity"
        return default_owner() if source == "server" else user.username


def _kernels_at_gateway(serverapp: Any) -> bool:
    """Whether the server's kernels are a gateway's (GatewayClient.url set)."""
    gateway = getattr(serverapp, "gateway_config", None)
    return gateway is not None and bool(gateway.gateway_enabled)


def _is_hub_single_user_server(serverapp: Any) -> bool:
    """Whether JupyterHub started this server for JUPYTERHUB_USER and authenticates its requests.

    Both, not the variable alone: it is inherited by every process of a hub user's session, and a
    server started there with a multi-user identity provider of its own must keep 'identity'.
    The hub's code is told by its module, not by isinstance, so that jupyterhub need not be
    importable: JupyterHubIdentityProvider (the single-user extension, jupyterhub >= 2 on
    jupyter_server 2), or the server app itself (the legacy single-user app,
    JUPYTERHUB_SINGLEUSER_EXTENSION=0, whose provider is jupyter_server's legacy one).
    """
    if serverapp is None or not os.environ.get("JUPYTERHUB_USER"):
        return False
    provider = getattr(serverapp, "identity_provider", None)
    return any(
        cls.__module__.split(".")[0] == "jupyterhub"
        for obj in (provider, serverapp)
        for cls in type(obj).__mro__
    )
