"""Starting sandboxes, from the warm pool or new: the half of SandboxManager that creates.

:class:`SandboxStarter` is SandboxManager's base class (manager.py). ``create`` (proxy kernel,
REST handlers, doctor, agent code) tries the warm pool, whose ``pool.claim`` calls back into
``attach_claimed``, and else starts a sandbox; the pool's refiller calls ``check_request`` and
``start_sandbox`` itself; the proxy kernel calls ``attach`` after a restart or by context. A
sandbox is handed out only once its kernel has answered kernel_info (``_wait_for_kernel``).
Connecting to a kernel (``attach``, ``attach_claimed``, ``_wait_for_kernel``) is the base class,
:class:`~.attaching.SandboxAttacher`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
from typing import TYPE_CHECKING, Any

from jupyter_sandbox.protocol.errors import InvalidSettingError, SandboxError
from jupyter_sandbox.sandbox.attestation import (
    read_boot_probe,
    record_attestation,
    request_engine_sample,
    stage_boot_probe,
)
from jupyter_sandbox.sandbox.container_spec import (
    BASE_ENVIRONMENT,
    SpecRequest,
    build_container_spec,
    check_environment,
)
from jupyter_sandbox.sandbox.host.clock import now_iso
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.identity import check_owner
from jupyter_sandbox.sandbox.kernel_link.attaching import SandboxAttacher
from jupyter_sandbox.sandbox.kernel_link.link import bridged_connection_info, new_connection_info
from jupyter_sandbox.sandbox.lifecycle import pool
from jupyter_sandbox.sandbox.lifecycle.contexts import check_context
from jupyter_sandbox.sandbox.lifecycle.quotas import SandboxQuotas, usage_of
from jupyter_sandbox.sandbox.network import NetworkSettings, apply_policy, stop_proxy
from jupyter_sandbox.sandbox.network.control import spawn_forwarder
from jupyter_sandbox.sandbox.network.tls_ca import make_sandbox_ca, trust_image_bundle
from jupyter_sandbox.sandbox.sandbox_types import RequestedSandbox, Sandbox, SandboxRequest
from jupyter_sandbox.sandbox.settings import RUNTIMES
from jupyter_sandbox.sandbox.workspace import plan_workspace

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.11

log = logging.getLogger(__name__)


class SandboxStarter(SandboxAttacher):
    """Creates sandboxes (from the warm pool or new) and connects to their kernels.

    ``pool.claim`` and ``record_attestation`` take a starter: all they use is declared here or
    in its base class.
    """

    # -- SandboxManager's own (manager.py), declared for the type checker ---------------------

    quotas: SandboxQuotas
    network: NetworkSettings
    forwarder_spawns: dict[str, asyncio.Task[None]]  # by sandbox id, while in flight

    async def remove(self, owner: str, sandbox_id: str) -> None:
        raise NotImplementedError

    def update_state(self, sandbox_id: str, **changes: Any) -> dict[str, Any]:
        raise NotImplementedError

    def backend_key(self) -> dict[str, Any]:
        raise NotImplementedError

    # -- creating -----------------------------------------------------------------------------

    async def create(
        self,
        owner: str,
        *,
        context: str | None = None,
        ephemeral: bool = False,
        notebook: str = "",
        purpose: str = "",
        network: Any = None,
        **requested: Unpack[RequestedSandbox],
    ) -> Sandbox:
        """A sandbox for ``owner`` whose kernel answers: claimed from the warm pool, or started.

        ``requested``: its runtime, image, limits, environment and launch directory, as
        :meth:`check_request` takes them (RequestedSandbox). ``context`` names the interpreter
        so that it can be found again (see contexts.py); ``ephemeral`` marks a sandbox that lives only as long as its kernel process, which the
        reaper removes once no process holds its context. ``launch_dir`` is shown at
        /workspace as SandboxSettings.workspace_mode says. Everything is checked before anything
        is written. A warm pool member made for the same request is taken when there is one
        (pool.py); otherwise a new sandbox is started, and on any failure its container and
        host directory are removed again. ``network`` is its policy (network/policy.py: a REST
        dict or the text form; None: ``NetworkSettings.default_policy``), applied once the
        sandbox answers: pool members are made without network, whatever policy claims them.
        """
        policy = self.network.policy_for(network)
        request = self.check_request(owner, **requested)
        # A claimed pool member counts like a new sandbox; a new one re-checks with its
        # reservation written (start_sandbox), so racing starts cannot both slip through.
        self.quotas.check(usage_of(self.settings.state_path, owner).plus(request.limits))
        claimed = await self.claim_from_pool(
            request, context=context, ephemeral=ephemeral, notebook=notebook
        )
        sandbox = claimed or await self._start_new(
            request, context=context, ephemeral=ephemeral, notebook=notebook, purpose=purpose
        )
        if policy.allows_network:
            directory = SandboxDirectory(self.settings.state_path, sandbox.sandbox_id)
            spawning = self.forwarder_spawns.get(sandbox.sandbox_id)
            if spawning is not None:  # its forwarder is on its way: not a second one
                await asyncio.shield(spawning)
            try:
                await apply_policy(
                    self.backend,
                    directory,
                    sandbox.sandbox_id,
                    policy,
                    self.network.proxy_options(),
                )
            except BaseException:
                await asyncio.shield(self._discard(sandbox.sandbox_id, directory))
                raise
        return sandbox

    async def _start_new(self, request: SandboxRequest, **kwargs: Any) -> Sandbox:
        pool.record_wanted(self.settings.state_path, request)
        return await self.start_sandbox(request, **kwargs)

    async def claim_from_pool(
        self,
        request: SandboxRequest,
        *,
        context: str | None = None,
        ephemeral: bool = False,
        notebook: str = "",
    ) -> Sandbox | None:
        """Only from the warm pool: a member made for ``request`` (see :meth:`check_request`),
        now holding ``context``; None when no member fits."""
        if context is not None:
            check_context(context)
        return await pool.claim(
            self, request, context=context, ephemeral=ephemeral, notebook=notebook
        )

    def check_request(self, owner: str, **requested: Unpack[RequestedSandbox]) -> SandboxRequest:
        """The checked facts of a new sandbox, with the settings' defaults filled in."""
        check_owner(owner)
        image, environment = requested.get("image"), requested.get("environment")
        launch_dir = requested.get("launch_dir")
        runtime = requested.get("runtime") or self.settings.runtime
        if runtime not in RUNTIMES:
            raise InvalidSettingError(
                f"runtime must be one of {', '.join(RUNTIMES)}, not {runtime!r}"
            )
        return SandboxRequest(
            owner=owner,
            runtime=runtime,
            image=self.settings.check_image(image) if image else self.settings.image,
            limits=self.settings.requested_limits(requested.get("limits")),
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
        capped = self.settings.capping_host_writes
        try:
            directory.create(uid, io_cap=self.settings.io_bytes if capped else 0)
            # Its egress CA (network/tls_ca.py): for every sandbox, as a policy may open the
            # network later and the trust variables are in every sandbox's environment.
            make_sandbox_ca(directory.root, sandbox_id)
            if workspace.mode == "copy-on-write":
                directory.create_overlay(uid, cap=request.limits.workspace_bytes if capped else 0)
            connection = new_connection_info(directory.container_socket_prefix())
            # Only runsc can checkpoint a kernel, and only one behind the bridge (settings).
            bridged = self.settings.memory_snapshots and request.runtime == "runsc"
            sandbox_copy = bridged_connection_info(connection) if bridged else None
            directory.write_connection_file(connection, uid, sandbox_copy)
            stage_boot_probe(directory)  # run by the sandbox's supervisor as the kernel starts
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
                "bridged": bridged,
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
            # Before it starts: its programs trust its image's CAs and its own CA from the first.
            await trust_image_bundle(self.backend, sandbox_id, request.image, directory.root)
            await self.backend.start(sandbox_id)
            # Asked now, the engine's next cgroup sample comes while the kernel boots (run.py).
            engine_sample = request_engine_sample(self.backend, sandbox_id)
            try:
                sandbox = await self._wait_for_kernel(sandbox_id, directory)
                # What the engine said, so that a claim can skip asking again (attach_claimed).
                directory.update_state(container=dataclasses.asdict(sandbox.info))
                # Never fails the start (see its report); read before any request of the user.
                probe = await read_boot_probe(directory)
                # The engine was asked about the sandbox once its kernel answered; not again.
                await record_attestation(
                    self, sandbox_id, probe=probe, info=sandbox.info, engine_sample=engine_sample
                )
                if not bridged:  # gVisor could not checkpoint the forwarder's host socket
                    self._spawn_forwarder_soon(sandbox_id, directory)
            finally:
                engine_sample.cancel()  # too late to be used (its thread finishes on its own)
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

    def _spawn_forwarder_soon(self, sandbox_id: str, directory: SandboxDirectory) -> None:
        """Start the network forwarder (network/control.py), which under the policy none tells
        programs that the policy refused them, beside the caller rather than before it
        returns: an engine exec on a loaded machine can take as long as a cold start.
        Never fails the start: without it a program sees "connection refused" instead, and a
        policy that allows network starts it again."""

        async def spawn() -> None:
            try:
                await spawn_forwarder(self.backend, directory, sandbox_id)
            except SandboxError as exc:
                log.warning("sandbox %s: no network forwarder started: %s", sandbox_id, exc)

        task = asyncio.ensure_future(spawn())
        self.forwarder_spawns[sandbox_id] = task
        task.add_done_callback(lambda _: self.forwarder_spawns.pop(sandbox_id, None))

    def _environment(self, extra: dict[str, str]) -> dict[str, str]:
        env = {**BASE_ENVIRONMENT, **self.settings.environment, **extra}
        check_environment(env)
        return env

    async def _discard(self, sandbox_id: str, directory: SandboxDirectory) -> None:
        try:
            await asyncio.to_thread(stop_proxy, directory)
            await self.backend.remove(sandbox_id)
        finally:
            directory.remove()
