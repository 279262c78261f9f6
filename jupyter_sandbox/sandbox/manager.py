"""SandboxManager: the one place that decides what a sandbox is and who may touch it.

Callers: the proxy kernel (one sandbox per kernel), the server extension (REST, pool, culler),
the CLI, the reaper, the doctor and agent code. Every public method takes the ``owner`` and
treats another owner's sandbox exactly like a missing one. The manager owns the sandbox's host
directory; the backend owns the container; :meth:`~SandboxManager.remove` ends both.

This module holds construction (with the backend ``backend_class`` names, made on first use),
finding and restarting, the state file, and the operations on a running sandbox. The manager
is composed of parts rather than built on base classes: starting a sandbox is its
:attr:`~SandboxManager.starter` (:class:`~.starting.SandboxStarter`), connecting to a kernel its
:attr:`~SandboxManager.attacher` (:class:`~.attaching.SandboxAttacher`), each handed the manager
as the narrow protocol it needs (sandbox_access.py); the manager's calls of the same names
delegate to them. What a front end asks (create with context, snapshot, metadata, deadline) is
use_cases.py, over these calls. The owner and id checks are in identity.py and the ``Sandbox``
and ``SandboxRequest`` values in sandbox_types.py. All of those are re-exported here, where
callers have always imported them from.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traitlets import Type
from traitlets.config import Config, LoggingConfigurable

from jupyter_sandbox.protocol.errors import SandboxConflictError, SandboxNotFoundError
from jupyter_sandbox.protocol.statuses import SandboxStatus
from jupyter_sandbox.sandbox.attestation import AttestationReport, record_attestation, stored_report
from jupyter_sandbox.sandbox.backends.base import (
    ExecOptions,
    SandboxBackend,
    Terminal,
    TerminalOptions,
)
from jupyter_sandbox.sandbox.backends.records import ExecResult, SandboxInfo
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory, sandbox_directories
from jupyter_sandbox.sandbox.host.state_record import SandboxState
from jupyter_sandbox.sandbox.identity import (
    check_owner,
    check_sandbox_id,
    default_owner,
    is_sandbox_id,
)
from jupyter_sandbox.sandbox.kernel_link.attaching import SandboxAttacher
from jupyter_sandbox.sandbox.kernel_link.clients import KernelClients
from jupyter_sandbox.sandbox.lifecycle.contexts import check_context
from jupyter_sandbox.sandbox.lifecycle.quotas import SandboxQuotas
from jupyter_sandbox.sandbox.lifecycle.usage import SandboxUsage
from jupyter_sandbox.sandbox.network import (
    NetworkPolicy,
    NetworkSettings,
    apply_policy,
    policy_of_state,
    read_audit,
)
from jupyter_sandbox.sandbox.operations.files import SandboxFiles
from jupyter_sandbox.sandbox.operations.stats import SandboxStats, measure_stats
from jupyter_sandbox.sandbox.operations.terminals import (
    DEFAULT_COLS,
    DEFAULT_ROWS,
    SandboxTerminals,
)
from jupyter_sandbox.sandbox.sandbox_types import (
    ClaimOptions,
    CreateOptions,
    RequestedSandbox,
    Sandbox,
    SandboxRequest,
    StartOptions,
)
from jupyter_sandbox.sandbox.settings import SandboxSettings, with_moved_settings
from jupyter_sandbox.sandbox.starting import SandboxStarter

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.11

    from jupyter_sandbox.sandbox.operations.background import BackgroundCommands
    from jupyter_sandbox.sandbox.operations.ports import SandboxPorts
    from jupyter_sandbox.sandbox.snapshots.service import Snapshots

__all__ = [
    "Sandbox",
    "SandboxManager",
    "SandboxRequest",
    "check_owner",
    "check_sandbox_id",
    "default_owner",
    "is_sandbox_id",
]

log = logging.getLogger(__name__)

DOCKER_BACKEND = "jupyter_sandbox.sandbox.backends.docker.backend.DockerBackend"


class BackendClass(Type):  # type: ignore[type-arg]
    """A ``Type`` whose default, a dotted name, is imported on first use of the trait rather
    than when the manager is made (traitlets' ``Type`` imports it at once): a kernel claiming a
    warm sandbox never imports the engine's client, a large part of its start."""

    def instance_init(self, obj: Any) -> None:
        pass  # a configured class is imported as the configuration is loaded, as ever


class SandboxManager(LoggingConfigurable):
    """Creates, finds, and removes the sandboxes of each owner."""

    backend_class = BackendClass(
        DOCKER_BACKEND,
        klass=SandboxBackend,
        config=True,
        help="""The backend sandboxes run on: a subclass of
        jupyter_sandbox.sandbox.backends.base.SandboxBackend (a class, or its dotted name),
        whose docstrings state what a backend must do. The default runs them as Docker
        containers under runsc or runc; its own settings are DockerBackend's.""",
    )

    def __init__(self, *, settings: SandboxSettings, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # Settings that moved to the backend's class, still read under their old names.
        moved = with_moved_settings(self.config, self.log)
        if moved != self.config:
            self.config = moved
        self.settings = settings
        self._backend: SandboxBackend | None = None
        self._backend_lock = threading.Lock()
        self.quotas = SandboxQuotas(parent=self)
        self.network = NetworkSettings(parent=self)
        # The parts, each handed this manager as the protocol it needs (sandbox_access.py).
        self.attacher = SandboxAttacher(self)
        self.starter = SandboxStarter(self, self.attacher, quotas=self.quotas, network=self.network)
        self.usage = SandboxUsage(self.update_state)  # commands', files', terminals' activity
        # Ready clients of the kernels, kept between code runs (kernel_link/clients.py).
        self.kernel_clients = KernelClients(parent=self)

    @classmethod
    def from_config(cls, config: Config | None = None) -> SandboxManager:
        """A manager configured like the kernel and server are (its backend: backend_class)."""
        config = config or Config()
        return cls(settings=SandboxSettings(config=config), config=config)

    @property
    def backend(self) -> SandboxBackend:
        """The backend (``backend_class``), made on first use: a kernel claiming a warm
        sandbox never pays for loading the engine's client. Thread-safe."""
        with self._backend_lock:
            if self._backend is None:
                self._backend = self.backend_class(parent=self)
            return self._backend

    def backend_key(self) -> dict[str, Any]:
        """The backend's class and its configuration section, for the warm pool's key: known
        without importing the backend (SandboxBackend, "Made from the configuration")."""
        if self.trait_has_value("backend_class"):  # configured, or made already
            cls = self.backend_class
            name = f"{cls.__module__}.{cls.__qualname__}"
        else:
            name = DOCKER_BACKEND
        section = self.config.get(name.rpartition(".")[2], {})
        return {"class": name, "config": {key: section[key] for key in sorted(section)}}

    # The operations, each made on first use (cached_property): some import the engine's
    # client, which a kernel that only claims a warm sandbox never needs.

    @functools.cached_property
    def files(self) -> SandboxFiles:
        """Files in this manager's running sandboxes: list, read, write, remove (files.py)."""
        return SandboxFiles(self, parent=self)

    @functools.cached_property
    def terminals(self) -> SandboxTerminals:
        """The terminals open in this manager's sandboxes and their cap (terminals.py)."""
        return SandboxTerminals(self, parent=self)

    @functools.cached_property
    def background(self) -> BackgroundCommands:
        """Commands left running in this manager's sandboxes (background.py)."""
        from jupyter_sandbox.sandbox.operations.background import BackgroundCommands

        return BackgroundCommands(self, parent=self)

    @functools.cached_property
    def ports(self) -> SandboxPorts:
        """Connections to servers listening inside this manager's sandboxes (ports.py)."""
        from jupyter_sandbox.sandbox.operations.ports import SandboxPorts

        return SandboxPorts(self, parent=self)

    @functools.cached_property
    def snapshots(self) -> Snapshots:
        """Workspace snapshots of this manager's sandboxes (snapshots/service.py)."""
        from jupyter_sandbox.sandbox.snapshots.service import Snapshots

        return Snapshots(self, parent=self)

    def load_backend(self) -> None:
        """Make the backend now rather than on its first use (:attr:`backend`)."""
        self.backend  # noqa: B018 (the property does the work)

    # -- starting (the starter's, starting.py) ------------------------------------------------

    @property
    def forwarder_spawns(self) -> dict[str, asyncio.Task[None]]:
        """The network forwarders being spawned beside a start, by sandbox id (starting.py)."""
        return self.starter.forwarder_spawns

    async def create(self, owner: str, **options: Unpack[CreateOptions]) -> Sandbox:
        """A sandbox for ``owner`` whose kernel answers: claimed from the warm pool, or started
        (SandboxStarter.create says what each of ``options`` means)."""
        return await self.starter.create(owner, **options)

    async def claim_from_pool(
        self, request: SandboxRequest, **options: Unpack[ClaimOptions]
    ) -> Sandbox | None:
        """Only from the warm pool (SandboxStarter.claim_from_pool)."""
        return await self.starter.claim_from_pool(request, **options)

    def check_request(self, owner: str, **requested: Unpack[RequestedSandbox]) -> SandboxRequest:
        """The checked facts of a new sandbox, with the settings' defaults filled in."""
        return self.starter.check_request(owner, **requested)

    async def start_sandbox(
        self, request: SandboxRequest, **options: Unpack[StartOptions]
    ) -> Sandbox:
        """A new sandbox for ``request``, never from the pool (SandboxStarter.start_sandbox)."""
        return await self.starter.start_sandbox(request, **options)

    # -- kernels (the attacher's, kernel_link/attaching.py) -----------------------------------

    def request_restart(self, sandbox_id: str) -> None:
        """Make the sandbox start a fresh kernel when its current one shuts down."""
        self.attacher.request_restart(sandbox_id)

    async def restartable(self, owner: str, sandbox_id: str) -> SandboxInfo:
        """The sandbox, if its interpreter can be restarted now (SandboxConflictError if not)."""
        return await self.attacher.restartable(owner, sandbox_id)

    async def restart_kernel(self, owner: str, sandbox_id: str) -> Sandbox:
        """A fresh interpreter in the same sandbox (files in /workspace stay)."""
        return await self.attacher.restart_kernel(owner, sandbox_id)

    def kernel_connection(self, sandbox_id: str) -> dict[str, Any]:
        """The host's connection info of the sandbox's current kernel."""
        return self.attacher.kernel_connection(sandbox_id)

    async def attach(self, owner: str, sandbox_id: str) -> Sandbox:
        """Reconnect to a running sandbox's kernel (after a proxy restart, or by context)."""
        return await self.attacher.attach(owner, sandbox_id)

    async def attach_claimed(self, owner: str, sandbox_id: str, timeout: float) -> Sandbox:
        """Connect to a pool member just claimed (SandboxAttacher.attach_claimed)."""
        return await self.attacher.attach_claimed(owner, sandbox_id, timeout)

    # -- finding and restarting ---------------------------------------------------------------

    async def find_context(self, owner: str, context: str) -> SandboxInfo | None:
        """``owner``'s running sandbox for ``context``, if there is one.

        A sandbox of that context stopped by a memory snapshot is restored from it (the kernel
        that asks resumes where it was); one that is no longer running otherwise is removed.
        """
        check_context(context)
        for directory in sandbox_directories(self.settings.state_path):
            state = directory.read_state()
            if state.get("owner") != owner or state.get("context") != context:
                continue
            try:
                info = await self.get(owner, directory.sandbox_id)
            except SandboxNotFoundError:
                directory.remove()
                continue
            if info.running:
                return info
            if checkpointed := state.get("checkpointed"):
                restored = await self.snapshots.restore_memory(owner, checkpointed)
                return restored.info
            await self.starter.discard(info.sandbox_id, directory)
        return None

    def read_state(self, sandbox_id: str) -> SandboxState:
        """The sandbox's mutable state (owner, context, kernel attached, last activity...)."""
        return SandboxDirectory(self.settings.state_path, check_sandbox_id(sandbox_id)).read_state()

    def update_state(self, sandbox_id: str, **changes: Unpack[SandboxState]) -> SandboxState:
        """Record mutable facts (last activity, attached notebook...) in the state file."""
        directory = SandboxDirectory(self.settings.state_path, check_sandbox_id(sandbox_id))
        return directory.update_state(**changes)

    # -- using --------------------------------------------------------------------------------

    async def get(self, owner: str, sandbox_id: str) -> SandboxInfo:
        """The sandbox if it exists and belongs to ``owner``; SandboxNotFoundError otherwise."""
        info = await self.backend.inspect(check_sandbox_id(sandbox_id))
        if info.owner != owner:
            raise SandboxNotFoundError(f"no sandbox {sandbox_id}")
        return info

    async def list_sandboxes(self, owner: str) -> list[SandboxInfo]:
        """The sandboxes of ``owner`` that this manager's state directory holds, in any state."""
        found = await self.backend.list_sandboxes(check_owner(owner))
        return [info for info in found if self.holds(info)]

    def holds(self, info: SandboxInfo) -> bool:
        """Whether ``info``'s host directory lies in this manager's state directory.

        Two managers (two host users, or tests) may share an engine: each only ever lists and
        reaps its own sandboxes.
        """
        return Path(info.host_dir).parent == self.settings.state_path

    async def running(self, owner: str, sandbox_id: str) -> SandboxInfo:
        """The owner's sandbox, if it is running: what runs something in it (a command, a
        terminal) needs. SandboxConflictError names the fix when it is not."""
        return await self.in_status(owner, sandbox_id, "running")

    async def in_status(
        self,
        owner: str,
        sandbox_id: str,
        status: SandboxStatus,
        fixes: dict[str, str] | None = None,
    ) -> SandboxInfo:
        """The owner's sandbox, if its status is ``status``; else SandboxConflictError saying
        what its status is and what to do (SandboxConflictError.of_status; ``fixes`` gives
        the fix for some statuses), found before the engine is asked: the engine refuses some
        actions on a container in the wrong state with a 500 (unpausing a running one)."""
        info = await self.get(owner, sandbox_id)
        if info.status != status:
            fix = (fixes or {}).get(info.status)
            raise SandboxConflictError.of_status(sandbox_id, info.status, fix)
        return info

    async def open_terminal(
        self,
        owner: str,
        sandbox_id: str,
        *,
        rows: int = DEFAULT_ROWS,
        cols: int = DEFAULT_COLS,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
    ) -> Terminal:
        """A shell on a TTY of ``rows`` x ``cols`` in the owner's running sandbox, as its user,
        in /workspace or ``cwd``, with ``env`` added (terminals.py); TooManyTerminalsError past
        the sandbox's cap. The caller closes it, which kills the shell and all it started;
        :meth:`close` closes what is left."""
        return await self.terminals.open(owner, sandbox_id, TerminalOptions(rows, cols, cwd, env))

    async def exec(
        self, owner: str, sandbox_id: str, argv: list[str], options: ExecOptions | None = None
    ) -> ExecResult:
        """Run ``argv`` in the owner's sandbox, which must be running, as ``options`` say
        (ExecOptions; by default a caller's command: supervised, 60 s, as the sandbox's user, in
        /workspace). SandboxConflictError names the fix when it is not running. While it runs,
        the sandbox is in use: not idle to the culler (sandbox/lifecycle/usage.py)."""
        await self.running(owner, sandbox_id)
        with self.usage.using(sandbox_id):
            return await self.backend.exec(sandbox_id, argv, options or ExecOptions())

    async def attestation(
        self, owner: str, sandbox_id: str, *, refresh: bool = False
    ) -> AttestationReport:
        """The sandbox's isolation as measured from inside (attestation/).

        The report made at start is kept in the state file; it is measured again when there is
        none or ``refresh`` is true.
        """
        await self.get(owner, sandbox_id)
        state = SandboxDirectory(self.settings.state_path, sandbox_id).read_state()
        report = None if refresh else stored_report(state)
        return report or await record_attestation(self, sandbox_id)

    async def stats(
        self, owner: str, sandbox_id: str, *, wait_for_cpu_percent: bool = False
    ) -> SandboxStats:
        """Current CPU, memory, pids and workspace use of the sandbox (stats.py), which is
        measured inside too: the sandbox must be running."""
        await self.running(owner, sandbox_id)
        return await measure_stats(
            self.backend, sandbox_id, wait_for_cpu_percent=wait_for_cpu_percent
        )

    async def network_policy(self, owner: str, sandbox_id: str) -> NetworkPolicy:
        """The sandbox's egress policy now (network/policy.py)."""
        await self.get(owner, sandbox_id)
        return policy_of_state(self.read_state(sandbox_id))

    async def set_network_policy(self, owner: str, sandbox_id: str, policy: Any) -> NetworkPolicy:
        """Change a running sandbox's egress policy at once; its kernel keeps its state."""
        policy = self.network.policy_for(policy)
        info = await self.get(owner, sandbox_id)
        if not info.running:
            raise SandboxConflictError(
                f"sandbox {sandbox_id} is {info.status}: resume it before changing its network"
            )
        directory = SandboxDirectory(self.settings.state_path, sandbox_id)
        return await apply_policy(
            self.backend, directory, sandbox_id, policy, self.network.proxy_options()
        )

    async def network_audit(
        self, owner: str, sandbox_id: str, limit: int = 1000
    ) -> list[dict[str, Any]]:
        """The sandbox's last ``limit`` egress decisions, oldest first (network/audit.py)."""
        await self.get(owner, sandbox_id)
        return read_audit(SandboxDirectory(self.settings.state_path, sandbox_id).root, limit)

    async def pause(self, owner: str, sandbox_id: str) -> None:
        await self.in_status(owner, sandbox_id, "running", {"paused": "it is paused already"})
        self.kernel_clients.discard(sandbox_id)
        await self.backend.pause(sandbox_id)

    async def resume(self, owner: str, sandbox_id: str) -> None:
        await self.in_status(
            owner, sandbox_id, "paused", {"running": "only a paused sandbox can be resumed"}
        )
        await self.backend.resume(sandbox_id)

    async def remove(self, owner: str, sandbox_id: str) -> None:
        """Remove the sandbox and its host directory. Removing a removed sandbox is fine."""
        try:
            info = await self.get(owner, sandbox_id)
        except SandboxNotFoundError:
            return
        self.kernel_clients.discard(sandbox_id)
        await self.starter.discard(
            sandbox_id, SandboxDirectory(self.settings.state_path, info.sandbox_id)
        )
        self.usage.forget(sandbox_id)
        log.info("sandbox %s of %s removed", sandbox_id, owner)

    async def close(self) -> None:
        # Forwarders on their way (starting.py) are let finish: an engine exec, under a second.
        await asyncio.gather(*self.forwarder_spawns.values(), return_exceptions=True)
        self.kernel_clients.close()
        if "terminals" in vars(self):  # made (cached_property): their shells are killed
            await self.terminals.close_all()  # through the backend, closed below
        if self._backend is not None:
            await self._backend.close()
