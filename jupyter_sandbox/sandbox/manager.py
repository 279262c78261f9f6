"""SandboxManager: the one place that decides what a sandbox is and who may touch it.

Callers: the proxy kernel (one sandbox per kernel), the server extension (REST, pool, culler),
the CLI and agent code. Every public method takes the ``owner`` and treats another owner's
sandbox exactly like a missing one. The manager owns the sandbox's host directory; the backend
owns the container; :meth:`remove` ends both.
"""

from __future__ import annotations

import asyncio
import dataclasses
import getpass
import logging
import os
import re
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traitlets.config import Config, LoggingConfigurable

from . import pool
from .attestation import AttestationReport, record_attestation, stored_report
from .backend import ExecResult, SandboxBackend, SandboxInfo
from .container_spec import (
    BASE_ENVIRONMENT,
    SpecRequest,
    build_container_spec,
    check_environment,
    now_iso,
)
from .contexts import check_context
from .errors import InvalidSettingError, SandboxNotFoundError, SandboxStartError
from .hostdir import SandboxDirectory
from .kernel_link import (
    new_connection_info,
    shut_kernel_down,
    wait_until_ready,
    with_socket_prefix,
)
from .limits import SandboxLimits
from .quotas import SandboxQuotas, usage_of
from .settings import RUNTIMES, SandboxSettings
from .stats import SandboxStats, measure_stats
from .workspace import NO_WORKSPACE, WorkspacePlan, plan_workspace

log = logging.getLogger(__name__)

_SANDBOX_ID = re.compile(r"^[0-9a-f]{12}$")


@dataclass(frozen=True)
class SandboxRequest:
    """The checked facts a new sandbox is made from: everything but its identity and state."""

    owner: str
    runtime: str
    image: str
    limits: SandboxLimits
    environment: dict[str, str]  # complete: the fixed base, the settings' and the request's
    workspace: WorkspacePlan
    launch_dir: str | None = None  # as the caller gave it
    custom_environment: bool = False  # whether the caller added environment variables


@dataclass(frozen=True)
class Sandbox:
    """A running sandbox whose kernel has answered: what a caller needs to use it."""

    info: SandboxInfo
    limits: SandboxLimits
    connection_info: dict[str, Any]  # host side: plain jupyter_client connects with it
    kernel_info: dict[str, Any]
    workspace: WorkspacePlan = NO_WORKSPACE

    @property
    def sandbox_id(self) -> str:
        return self.info.sandbox_id


def check_owner(owner: str) -> str:
    if not owner or len(owner) > 200 or not owner.isprintable():
        raise InvalidSettingError(
            f"owner must be a printable name of 1 to 200 characters, not {owner!r}"
        )
    return owner


def default_owner() -> str:
    """The owner of sandboxes started outside a request: JUPYTER_SANDBOX_OWNER, else the
    JupyterHub user whose single-user server this is, else the OS user."""
    return (
        os.environ.get("JUPYTER_SANDBOX_OWNER")
        or os.environ.get("JUPYTERHUB_USER")
        or getpass.getuser()
    )


def is_sandbox_id(name: str) -> bool:
    return bool(_SANDBOX_ID.match(name))


def check_sandbox_id(sandbox_id: str) -> str:
    if not is_sandbox_id(sandbox_id):
        raise SandboxNotFoundError(f"no sandbox {sandbox_id!r}: ids are 12 hex digits")
    return sandbox_id


class SandboxManager(LoggingConfigurable):
    """Creates, finds, and removes the sandboxes of each owner."""

    def __init__(
        self,
        *,
        settings: SandboxSettings,
        backend: SandboxBackend | Callable[[], SandboxBackend],
        **kwargs: Any,
    ) -> None:
        """``backend`` may be a factory: it is then called on first use of :attr:`backend`, so
        a kernel claiming a warm sandbox never pays for loading the engine's client."""
        super().__init__(**kwargs)
        self.settings = settings
        self._backend = backend if isinstance(backend, SandboxBackend) else None
        self._backend_factory = None if isinstance(backend, SandboxBackend) else backend
        self._backend_lock = threading.Lock()
        self.quotas = SandboxQuotas(parent=self)

    @classmethod
    def from_config(cls, config: Config | None = None) -> SandboxManager:
        """A manager on the Docker engine, configured like the kernel and server are."""
        settings = SandboxSettings(config=config or Config())

        def docker_backend() -> SandboxBackend:
            from .docker_backend import DockerBackend  # docker-py: ~0.1 s to import
            from .engine import DockerEngine

            engine = DockerEngine(timeout=settings.engine_timeout)
            return DockerBackend(engine, settings.docker_runtime_names)

        return cls(settings=settings, backend=docker_backend, config=config or Config())

    @property
    def backend(self) -> SandboxBackend:
        """The container backend, made on first use (thread-safe: see :meth:`load_backend`)."""
        with self._backend_lock:
            if self._backend is None:
                assert self._backend_factory is not None
                self._backend = self._backend_factory()
            return self._backend

    def load_backend(self) -> None:
        """Make the backend now; a kernel calls this on a worker thread once it relays, so
        that its first engine call does not stall the event loop on imports."""
        self.backend  # noqa: B018 (the property does the work)

    # -- creating -----------------------------------------------------------------------------

    async def create(
        self,
        owner: str,
        *,
        runtime: str | None = None,
        image: str | None = None,
        limits: dict[str, Any] | None = None,
        environment: dict[str, str] | None = None,
        context: str | None = None,
        ephemeral: bool = False,
        launch_dir: str | None = None,
        notebook: str = "",
        purpose: str = "",
    ) -> Sandbox:
        """A sandbox for ``owner`` whose kernel answers: claimed from the warm pool, or started.

        ``context`` names the interpreter so that it can be found again (see contexts.py);
        ``ephemeral`` marks a sandbox that lives only as long as its kernel process, which the
        reaper removes once no process holds its context. ``launch_dir`` is shown at
        /workspace as SandboxSettings.workspace_mode says. Everything is checked before anything
        is written. A warm pool member made for the same request is taken when there is one
        (pool.py); otherwise a new sandbox is started, and on any failure its container and
        host directory are removed again.
        """
        request = self.check_request(
            owner,
            runtime=runtime,
            image=image,
            limits=limits,
            environment=environment,
            launch_dir=launch_dir,
        )
        if context is not None:
            check_context(context)
        # A claimed pool member counts like a new sandbox; a new one re-checks with its
        # reservation written (start_sandbox), so racing starts cannot both slip through.
        self.quotas.check(usage_of(self.settings.state_path, owner).plus(request.limits))
        claimed = await pool.claim(
            self, request, context=context, ephemeral=ephemeral, notebook=notebook
        )
        if claimed is not None:
            return claimed
        pool.record_wanted(self.settings.state_path, request)
        return await self.start_sandbox(
            request, context=context, ephemeral=ephemeral, notebook=notebook, purpose=purpose
        )

    async def claim_from_pool(
        self,
        owner: str,
        *,
        runtime: str | None = None,
        image: str | None = None,
        limits: dict[str, Any] | None = None,
        environment: dict[str, str] | None = None,
        context: str | None = None,
        ephemeral: bool = False,
        launch_dir: str | None = None,
        notebook: str = "",
    ) -> Sandbox | None:
        """Like :meth:`create`, but only from the warm pool: None when no member fits."""
        request = self.check_request(
            owner,
            runtime=runtime,
            image=image,
            limits=limits,
            environment=environment,
            launch_dir=launch_dir,
        )
        if context is not None:
            check_context(context)
        return await pool.claim(
            self, request, context=context, ephemeral=ephemeral, notebook=notebook
        )

    def check_request(
        self,
        owner: str,
        *,
        runtime: str | None = None,
        image: str | None = None,
        limits: dict[str, Any] | None = None,
        environment: dict[str, str] | None = None,
        launch_dir: str | None = None,
    ) -> SandboxRequest:
        """The checked facts of a new sandbox, with the settings' defaults filled in."""
        check_owner(owner)
        runtime = runtime or self.settings.runtime
        if runtime not in RUNTIMES:
            raise InvalidSettingError(
                f"runtime must be one of {', '.join(RUNTIMES)}, not {runtime!r}"
            )
        return SandboxRequest(
            owner=owner,
            runtime=runtime,
            image=image or self.settings.image,
            limits=self.settings.default_limits().with_overrides(**(limits or {})),
            environment=self._environment(environment or {}),
            workspace=plan_workspace(self.settings.workspace_mode, launch_dir),
            launch_dir=launch_dir,
            custom_environment=bool(environment),
        )

    async def start_sandbox(
        self,
        request: SandboxRequest,
        *,
        context: str | None = None,
        ephemeral: bool = False,
        notebook: str = "",
        purpose: str = "",
        pool_key: str | None = None,
    ) -> Sandbox:
        """Start a new sandbox for ``request`` (never from the pool) and wait for its kernel.

        ``pool_key`` marks a warm pool member: it has no context until a claim gives it one.
        On any failure the container and host directory are removed again.
        """
        await self.backend.check_ready(request.runtime, request.image)
        sandbox_id = secrets.token_hex(6)
        directory = SandboxDirectory(self.settings.state_path, sandbox_id)
        uid = self.settings.effective_uid
        workspace = request.workspace
        directory.create(uid)
        try:
            if workspace.mode == "copy-on-write":
                directory.create_overlay(uid)
            connection = new_connection_info(directory.container_socket_prefix())
            directory.write_connection_file(connection, uid)
            now = now_iso()
            state: dict[str, Any] = {
                "owner": request.owner,
                "created": now,
                "last_activity": now,
                "context": context,
                "ephemeral": ephemeral,
                "runtime": request.runtime,
                "limits": request.limits.as_settings(),
                "workspace": {"mode": workspace.mode, "note": workspace.note},
                "notebook": notebook,
            }
            if pool_key is not None:
                state["pool"] = pool_key
            directory.write_state(state)
            spec_request = SpecRequest(
                sandbox_id,
                request.owner,
                request.runtime,
                request.image,
                request.limits,
                request.environment,
                purpose,
                workspace,
            )
            if pool_key is None:  # the state file is this sandbox's reservation; see quotas.py
                self.quotas.check(usage_of(self.settings.state_path, request.owner))
            spec = build_container_spec(self.settings, spec_request, directory)
            await self.backend.create(sandbox_id, spec)
            await self.backend.start(sandbox_id)
            sandbox = await self._wait_for_kernel(sandbox_id, directory)
            # What the engine said, so that a claim can skip asking again (attach_claimed).
            directory.update_state(container=dataclasses.asdict(sandbox.info))
            await record_attestation(self, sandbox_id)  # never fails the start; see its report
        except BaseException:
            await asyncio.shield(self._discard(sandbox_id, directory))
            raise
        log.info(
            "sandbox %s started for %s (%s, %s)%s",
            sandbox_id,
            request.owner,
            request.runtime,
            request.image,
            " for the warm pool" if pool_key else "",
        )
        return sandbox

    async def attach(self, owner: str, sandbox_id: str) -> Sandbox:
        """Reconnect to a running sandbox's kernel (after a proxy restart, or by context)."""
        await self.get(owner, sandbox_id)
        return await self._wait_for_kernel(
            sandbox_id, SandboxDirectory(self.settings.state_path, sandbox_id)
        )

    async def attach_claimed(self, owner: str, sandbox_id: str, timeout: float) -> Sandbox:
        """Connect to a pool member just claimed: it must be ``owner``'s, running, and answer
        kernel_info within ``timeout`` seconds (SandboxError otherwise)."""
        directory = SandboxDirectory(self.settings.state_path, check_sandbox_id(sandbox_id))
        recorded = directory.read_state().get("container")
        if recorded is None:  # made by an older version: ask the engine
            info = await self.get(owner, sandbox_id)
        else:
            # The kernel's answer below proves the container runs; the engine is not asked,
            # so a warm start needs no engine client at all.
            info = SandboxInfo(**recorded)
        if info.owner != owner:
            raise SandboxNotFoundError(f"no sandbox {sandbox_id}")
        if not info.running:
            raise SandboxStartError(f"sandbox {sandbox_id} is not running: {info.death_cause()}")
        return await self._wait_for_kernel(sandbox_id, directory, timeout, info)

    async def find_context(self, owner: str, context: str) -> SandboxInfo | None:
        """``owner``'s running sandbox for ``context``, if there is one.

        A sandbox of that context that is no longer running is removed on the way.
        """
        check_context(context)
        state_dir = self.settings.state_path
        if not state_dir.is_dir():
            return None
        for entry in sorted(state_dir.iterdir()):
            if not is_sandbox_id(entry.name):
                continue
            directory = SandboxDirectory(state_dir, entry.name)
            state = directory.read_state()
            if state.get("owner") != owner or state.get("context") != context:
                continue
            try:
                info = await self.get(owner, entry.name)
            except SandboxNotFoundError:
                directory.remove()
                continue
            if info.running:
                return info
            await self._discard(info.sandbox_id, directory)
        return None

    def request_restart(self, sandbox_id: str) -> None:
        """Make the sandbox start a fresh kernel when its current one shuts down.

        The caller then sends the kernel a shutdown_request; files in /workspace stay. The new
        kernel's generation is recorded host-side first, so whoever attaches next finds it.
        """
        directory = SandboxDirectory(self.settings.state_path, check_sandbox_id(sandbox_id))
        generation = int(directory.read_state().get("generation", 0)) + 1
        directory.update_state(generation=generation)
        directory.request_restart(generation)

    async def restart_kernel(self, owner: str, sandbox_id: str) -> Sandbox:
        """A fresh interpreter in the same sandbox (files in /workspace stay), for callers that
        own no kernel process attached to it (the REST API). Returns once the new one answers."""
        await self.get(owner, sandbox_id)
        directory = SandboxDirectory(self.settings.state_path, sandbox_id)
        generation = int(directory.read_state().get("generation", 0))
        current = with_socket_prefix(
            directory.read_connection_file(), directory.socket_prefix_of(generation)
        )
        self.request_restart(sandbox_id)
        await shut_kernel_down(current, restart=True)
        return await self._wait_for_kernel(sandbox_id, directory)

    def read_state(self, sandbox_id: str) -> dict[str, Any]:
        """The sandbox's mutable state (owner, context, kernel attached, last activity...)."""
        return SandboxDirectory(self.settings.state_path, check_sandbox_id(sandbox_id)).read_state()

    def update_state(self, sandbox_id: str, **changes: Any) -> dict[str, Any]:
        """Record mutable facts (last activity, attached notebook...) in the state file."""
        directory = SandboxDirectory(self.settings.state_path, check_sandbox_id(sandbox_id))
        return directory.update_state(**changes)

    async def _wait_for_kernel(
        self,
        sandbox_id: str,
        directory: SandboxDirectory,
        timeout: float | None = None,
        info: SandboxInfo | None = None,
    ) -> Sandbox:
        connection = directory.read_connection_file()
        state = directory.read_state()
        generation = int(state.get("generation", 0))
        host_connection = with_socket_prefix(connection, directory.socket_prefix_of(generation))
        reply = await wait_until_ready(
            host_connection,
            timeout=self.settings.start_timeout if timeout is None else timeout,
            still_running=lambda: self._why_not_running(sandbox_id),
        )
        if info is None:
            info = await self.backend.inspect(sandbox_id)
        limits = SandboxLimits.parse(**state["limits"])
        workspace = state.get("workspace") or {}
        plan = WorkspacePlan(workspace.get("mode", "none"), None, workspace.get("note", ""))
        return Sandbox(info, limits, host_connection, reply, plan)

    def _environment(self, extra: dict[str, str]) -> dict[str, str]:
        env = {**BASE_ENVIRONMENT, **self.settings.environment, **extra}
        check_environment(env)
        return env

    async def _why_not_running(self, sandbox_id: str) -> str | None:
        try:
            info = await self.backend.inspect(sandbox_id)
        except SandboxNotFoundError:
            return "its container is gone"
        if info.running:
            return None
        tail = (await self.backend.logs(sandbox_id, tail=20)).strip()
        return info.death_cause() + (f"; its last output:\n{tail}" if tail else "")

    async def _discard(self, sandbox_id: str, directory: SandboxDirectory) -> None:
        try:
            await self.backend.remove(sandbox_id)
        finally:
            directory.remove()

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

    async def exec(
        self, owner: str, sandbox_id: str, argv: list[str], *, timeout: float = 60.0
    ) -> ExecResult:
        await self.get(owner, sandbox_id)
        return await self.backend.exec(sandbox_id, argv, timeout=timeout)

    async def attestation(
        self, owner: str, sandbox_id: str, *, refresh: bool = False
    ) -> AttestationReport:
        """The sandbox's isolation as measured from inside (attestation.py).

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
        """Current CPU, memory, pids and workspace use of the sandbox (stats.py)."""
        await self.get(owner, sandbox_id)
        return await measure_stats(
            self.backend, sandbox_id, wait_for_cpu_percent=wait_for_cpu_percent
        )

    async def pause(self, owner: str, sandbox_id: str) -> None:
        await self.get(owner, sandbox_id)
        await self.backend.pause(sandbox_id)

    async def resume(self, owner: str, sandbox_id: str) -> None:
        await self.get(owner, sandbox_id)
        await self.backend.resume(sandbox_id)

    async def remove(self, owner: str, sandbox_id: str) -> None:
        """Remove the sandbox and its host directory. Removing a removed sandbox is fine."""
        try:
            info = await self.get(owner, sandbox_id)
        except SandboxNotFoundError:
            return
        await self._discard(sandbox_id, SandboxDirectory(self.settings.state_path, info.sandbox_id))
        log.info("sandbox %s of %s removed", sandbox_id, owner)

    async def close(self) -> None:
        if self._backend is not None:
            await self._backend.close()
