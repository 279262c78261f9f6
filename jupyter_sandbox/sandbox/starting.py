"""Starting sandboxes, from the warm pool or new: the part of SandboxManager that creates.

:class:`SandboxStarter` is a part SandboxManager has (``SandboxManager.starter``), handed the
manager as a :class:`~jupyter_sandbox.sandbox.sandbox_access.SandboxHost` (what the warm pool's
claim and the attestation take in turn), the manager's
:class:`~jupyter_sandbox.sandbox.kernel_link.attaching.SandboxAttacher` (which connects to the
kernels) and its quotas and network settings; the manager's ``create``, ``claim_from_pool``,
``check_request`` and ``start_sandbox`` call it. ``create`` (proxy kernel, use_cases.py, doctor,
agent code) tries the warm pool, whose ``pool.claim`` calls back into ``attach_claimed``, and
else starts a sandbox; the pool's refiller calls ``check_request`` and ``start_sandbox`` itself.
A sandbox is handed out only once its kernel has answered kernel_info
(``SandboxAttacher.wait_for_kernel``).
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
from jupyter_sandbox.sandbox.host.state_record import SandboxState
from jupyter_sandbox.sandbox.host.workspace_pin import pin_workspace
from jupyter_sandbox.sandbox.identity import check_owner
from jupyter_sandbox.sandbox.kernel_link.link import bridged_connection_info, new_connection_info
from jupyter_sandbox.sandbox.lifecycle import pool
from jupyter_sandbox.sandbox.lifecycle.contexts import check_context
from jupyter_sandbox.sandbox.lifecycle.quotas import SandboxQuotas, usage_of
from jupyter_sandbox.sandbox.network import NetworkSettings, apply_policy, stop_proxy
from jupyter_sandbox.sandbox.network.control import spawn_forwarder
from jupyter_sandbox.sandbox.network.tls_ca import make_sandbox_ca, trust_image_bundle
from jupyter_sandbox.sandbox.sandbox_types import RequestedSandbox, Sandbox, SandboxRequest
from jupyter_sandbox.sandbox.settings import RUNTIMES
from jupyter_sandbox.sandbox.workspace.plan import WorkspacePlan, plan_workspace
from jupyter_sandbox.sandbox.workspace.refresh import start_refresher

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.11

    from jupyter_sandbox.sandbox.kernel_link.attaching import SandboxAttacher
    from jupyter_sandbox.sandbox.sandbox_access import SandboxHost

log = logging.getLogger(__name__)

# The state keys a start or a claim writes itself (start_sandbox, pool.claim) or that later
# steps own: a caller's ``record`` may not name them.
OWN_STATE_KEYS = frozenset(
    {
        "owner",
        "created",
        "last_activity",
        "context",
        "ephemeral",
        "runtime",
        "limits",
        "workspace",
        "notebook",
        "bridged",
        "pool",
        "claimed",
        "container",
        "attestation",
        "generation",
    }
)


class SandboxStarter:
    """Creates sandboxes (from the warm pool or new) and waits, through the attacher, until
    their kernels answer.

    ``host``: the manager that has this part, as what ``pool.claim`` and
    ``record_attestation`` take; ``attacher`` waits for the new kernels; ``quotas`` and
    ``network``: the manager's settings of those.
    """

    def __init__(
        self,
        host: SandboxHost,
        attacher: SandboxAttacher,
        *,
        quotas: SandboxQuotas,
        network: NetworkSettings,
    ) -> None:
        self.host = host
        self.attacher = attacher
        self.quotas = quotas
        self.network = network
        # The forwarders being spawned beside a start (_spawn_forwarder_soon), by sandbox id.
        self.forwarder_spawns: dict[str, asyncio.Task[None]] = {}

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
        record: dict[str, Any] | None = None,
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
        ``record``: facts the caller keeps with the sandbox (its metadata, its deadline:
        use_cases.py), written into its state file together with its context, by the same write
        that makes a new sandbox's state or claims a pool member: no sandbox is seen without them.
        """
        policy = self.network.policy_for(network)
        record = check_record(record)
        request = self.check_request(owner, **requested)
        # A claimed pool member counts like a new sandbox; a new one re-checks with its
        # reservation written (start_sandbox), so racing starts cannot both slip through.
        self.quotas.check(usage_of(self.host.settings.state_path, owner).plus(request.limits))
        claimed = await self.claim_from_pool(
            request, context=context, ephemeral=ephemeral, notebook=notebook, record=record
        )
        sandbox = claimed or await self._start_new(
            request,
            context=context,
            ephemeral=ephemeral,
            notebook=notebook,
            purpose=purpose,
            record=record,
        )
        if policy.allows_network:
            directory = SandboxDirectory(self.host.settings.state_path, sandbox.sandbox_id)
            spawning = self.forwarder_spawns.get(sandbox.sandbox_id)
            if spawning is not None:  # its forwarder is on its way: not a second one
                await asyncio.shield(spawning)
            try:
                await apply_policy(
                    self.host.backend,
                    directory,
                    sandbox.sandbox_id,
                    policy,
                    self.network.proxy_options(),
                )
            except BaseException:
                await asyncio.shield(self.discard(sandbox.sandbox_id, directory))
                raise
        return sandbox

    async def _start_new(self, request: SandboxRequest, **kwargs: Any) -> Sandbox:
        pool.record_wanted(self.host.settings.state_path, request)
        return await self.start_sandbox(request, **kwargs)

    async def claim_from_pool(
        self,
        request: SandboxRequest,
        *,
        context: str | None = None,
        ephemeral: bool = False,
        notebook: str = "",
        record: dict[str, Any] | None = None,
    ) -> Sandbox | None:
        """Only from the warm pool: a member made for ``request`` (see :meth:`check_request`),
        now holding ``context`` and ``record`` (as :meth:`create` takes it); None when no member
        fits."""
        if context is not None:
            check_context(context)
        return await pool.claim(
            self.host,
            request,
            context=context,
            ephemeral=ephemeral,
            notebook=notebook,
            record=check_record(record),
        )

    def check_request(self, owner: str, **requested: Unpack[RequestedSandbox]) -> SandboxRequest:
        """The checked facts of a new sandbox, with the settings' defaults filled in."""
        check_owner(owner)
        image, environment = requested.get("image"), requested.get("environment")
        launch_dir = requested.get("launch_dir")
        runtime = requested.get("runtime") or self.host.settings.runtime
        if runtime not in RUNTIMES:
            raise InvalidSettingError(
                f"runtime must be one of {', '.join(RUNTIMES)}, not {runtime!r}"
            )
        return SandboxRequest(
            owner=owner,
            runtime=runtime,
            image=self.host.settings.check_image(image) if image else self.host.settings.image,
            limits=self.host.settings.requested_limits(requested.get("limits")),
            environment=self._environment(environment or {}),
            workspace=plan_workspace(
                self.host.settings.workspace_mode,
                launch_dir,
                requested.get("workspace_root"),
                host_only=(self.network.credentials_path,),
            ),
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
        record: dict[str, Any] | None = None,
    ) -> Sandbox:
        """Start a new sandbox for ``request`` (never from the pool) and wait for its kernel.

        ``pool_key`` marks a warm pool member: it has no context until a claim gives it one.
        ``record`` (as :meth:`create` takes it) is in its first state file. On any failure the
        container and host directory are removed again.
        """
        record = check_record(record)
        await self.host.backend.check_ready(request.runtime, request.image)
        sandbox_id = secrets.token_hex(6)
        directory = SandboxDirectory(self.host.settings.state_path, sandbox_id)
        uid = self.host.settings.effective_uid
        workspace = request.workspace
        capped = self.host.settings.capping_host_writes
        try:
            directory.create(uid, io_cap=self.host.settings.io_bytes if capped else 0)
            # Its egress CA (network/tls_ca.py): for every sandbox, as a policy may open the
            # network later and the trust variables are in every sandbox's environment.
            make_sandbox_ca(directory.root, sandbox_id)
            if workspace.mode == "copy-on-write":
                directory.create_overlay(uid, cap=request.limits.workspace_bytes if capped else 0)
            # What the engine mounts: the directory opened now, within its root (row 124).
            mounted = pin_workspace(workspace, directory.workspace_source)
            connection = new_connection_info(directory.container_socket_prefix())
            # Only runsc can checkpoint a kernel, and only one behind the bridge (settings).
            bridged = self.host.settings.memory_snapshots and request.runtime == "runsc"
            sandbox_copy = bridged_connection_info(connection) if bridged else None
            directory.write_connection_file(connection, uid, sandbox_copy)
            stage_boot_probe(directory)  # run by the sandbox's supervisor as the kernel starts
            now = now_iso()
            state: SandboxState = {
                **record,  # type: ignore[typeddict-item]
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
                mounted,
            )
            if pool_key is None:  # the state file is this sandbox's reservation; see quotas.py
                self.quotas.check(usage_of(self.host.settings.state_path, request.owner))
            spec = build_container_spec(self.host.settings, spec_request, directory)
            created = await self.host.backend.create(sandbox_id, spec)
            # Before it starts: its programs trust its image's CAs and its own CA from the first.
            await trust_image_bundle(
                self.host.backend,
                sandbox_id,
                created.image_id,
                directory.root,
                self.host.settings.state_path,
            )
            await self.host.backend.start(sandbox_id)
            refresher = asyncio.ensure_future(self._refresh_workspace(directory, workspace))
            # Asked now, the engine's next cgroup sample comes while the kernel boots (run.py).
            engine_sample = request_engine_sample(self.host.backend, sandbox_id)
            try:
                sandbox = await self.attacher.wait_for_kernel(sandbox_id, directory)
                # What the engine said, so that a claim can skip asking again (attach_claimed).
                directory.update_state(container=dataclasses.asdict(sandbox.info))
                # Never fails the start (see its report); read before any request of the user.
                probe = await read_boot_probe(directory)
                # The engine was asked about the sandbox once its kernel answered; not again.
                await record_attestation(
                    self.host,
                    sandbox_id,
                    probe=probe,
                    info=sandbox.info,
                    engine_sample=engine_sample,
                )
                if not bridged:  # gVisor could not checkpoint the forwarder's host socket
                    self._spawn_forwarder_soon(sandbox_id, directory)
                why_not = await refresher
                if why_not:
                    log.warning(
                        "sandbox %s: files the host adds to /workspace may be missing from its "
                        "listings (no refresher: %s)",
                        sandbox_id,
                        why_not,
                    )
            finally:
                engine_sample.cancel()  # too late to be used (its thread finishes on its own)
                refresher.cancel()  # done unless the start failed (the refresher then ends itself)
        except BaseException:
            await asyncio.shield(self.discard(sandbox_id, directory))
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

    @staticmethod
    async def _refresh_workspace(
        directory: SandboxDirectory, workspace: WorkspacePlan
    ) -> str | None:
        """Start keeping a copy-on-write /workspace's listings current (workspace/refresh.py);
        None once that runs (or is not needed), else why not. Run beside the kernel's start."""
        if workspace.mode != "copy-on-write" or workspace.source is None:
            return None
        return await asyncio.to_thread(start_refresher, directory, workspace.source)

    def _spawn_forwarder_soon(self, sandbox_id: str, directory: SandboxDirectory) -> None:
        """Start the network forwarder (network/control.py), which under the policy none tells
        programs that the policy refused them, beside the caller rather than before it
        returns: an engine exec on a loaded machine can take as long as a cold start.
        Never fails the start: without it a program sees "connection refused" instead, and a
        policy that allows network starts it again."""

        async def spawn() -> None:
            try:
                await spawn_forwarder(self.host.backend, directory, sandbox_id)
            except SandboxError as exc:
                log.warning("sandbox %s: no network forwarder started: %s", sandbox_id, exc)

        task = asyncio.ensure_future(spawn())
        self.forwarder_spawns[sandbox_id] = task
        task.add_done_callback(lambda _: self.forwarder_spawns.pop(sandbox_id, None))

    def _environment(self, extra: dict[str, str]) -> dict[str, str]:
        env = {**BASE_ENVIRONMENT, **self.host.settings.environment, **extra}
        check_environment(env)
        return env

    async def discard(self, sandbox_id: str, directory: SandboxDirectory) -> None:
        """Remove the sandbox's host proxy, its container and its host directory, whatever its
        owner (the caller checked it): SandboxManager.remove's end, and a failed start's."""
        try:
            await asyncio.to_thread(stop_proxy, directory)
            await self.host.backend.remove(sandbox_id)
        finally:
            directory.remove()


def check_record(record: dict[str, Any] | None) -> dict[str, Any]:
    """``record`` as :meth:`SandboxStarter.create` takes it ({} for None); ValueError, a
    caller's mistake, if it names a key the start writes itself (OWN_STATE_KEYS)."""
    record = dict(record or {})
    clash = sorted(record.keys() & OWN_STATE_KEYS)
    if clash:
        raise ValueError(f"a sandbox's record may not set {', '.join(clash)}: the start does")
    return record
