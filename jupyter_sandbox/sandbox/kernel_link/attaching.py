"""Connecting to a running sandbox's kernel: waiting until it answers, and saying why it does not;
and restarting it in place (a fresh interpreter, the same sandbox).

:class:`SandboxAttacher` is a part SandboxManager has (``SandboxManager.attacher``), handed
what it needs of the manager as a :class:`~jupyter_sandbox.sandbox.sandbox_access.SandboxLookup`;
the starter (starting.py) is handed it in turn. A new sandbox (starting.py), a claimed pool
member (``attach_claimed``), a kernel restarted in place (``SandboxManager.restart_kernel``) and
a proxy kernel finding its context again (``attach``) all end the same way: read the connection
file of the kernel's current generation, wait for kernel_info, and tell a dead container's cause
when it never answers. Kept apart from starting a sandbox, which decides what a sandbox is; this
only finds its kernel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jupyter_sandbox.protocol.errors import (
    SandboxConflictError,
    SandboxNotFoundError,
    SandboxStartError,
)
from jupyter_sandbox.sandbox.backends.records import SandboxInfo
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.identity import check_sandbox_id
from jupyter_sandbox.sandbox.kernel_link.link import (
    shut_kernel_down,
    wait_until_ready,
    with_socket_prefix,
)
from jupyter_sandbox.sandbox.limits import SandboxLimits
from jupyter_sandbox.sandbox.sandbox_types import Sandbox
from jupyter_sandbox.sandbox.workspace.plan import WorkspacePlan

if TYPE_CHECKING:
    from jupyter_sandbox.sandbox.sandbox_access import SandboxLookup


class SandboxAttacher:
    """Connects to the kernels of running sandboxes; a sandbox is handed out only once its
    kernel has answered kernel_info.

    ``host``: the settings, the backend and the owner check of the manager that has this part
    (read through it on every call: the manager makes its backend on first use).
    """

    def __init__(self, host: SandboxLookup) -> None:
        self.host = host

    # -- restarting in place ------------------------------------------------------------------

    def request_restart(self, sandbox_id: str) -> None:
        """Make the sandbox start a fresh kernel when its current one shuts down.

        The caller then sends the kernel a shutdown_request; files in /workspace stay. The new
        kernel's generation is recorded host-side first, so whoever attaches next finds it.
        """
        directory = SandboxDirectory(self.host.settings.state_path, check_sandbox_id(sandbox_id))
        directory.request_restart(directory.next_generation())

    async def restartable(self, owner: str, sandbox_id: str) -> SandboxInfo:
        """The sandbox, if its interpreter can be restarted now (SandboxConflictError if not).

        Checked before any restart is asked, by this manager or by a Jupyter kernel manager: a
        paused kernel cannot answer, and would take the restart on resuming."""
        info = await self.host.get(owner, sandbox_id)
        if not info.running:
            raise SandboxConflictError(
                f"sandbox {sandbox_id} is {info.status}: "
                + ("resume it first" if info.status == "paused" else "its interpreter is gone")
            )
        return info

    async def restart_kernel(self, owner: str, sandbox_id: str) -> Sandbox:
        """A fresh interpreter in the same sandbox (files in /workspace stay), for callers that
        own no kernel process attached to it (the REST API). Returns once the new one answers."""
        await self.restartable(owner, sandbox_id)
        current = self.kernel_connection(sandbox_id)
        self.request_restart(sandbox_id)
        await shut_kernel_down(current, restart=True)
        return await self.wait_for_kernel(
            sandbox_id, SandboxDirectory(self.host.settings.state_path, sandbox_id)
        )

    # -- connecting ---------------------------------------------------------------------------

    def kernel_connection(self, sandbox_id: str) -> dict[str, Any]:
        """The host's connection info of the sandbox's current kernel (each restart in place
        binds new socket paths: its state's ``generation`` says which kernel that is)."""
        directory = SandboxDirectory(self.host.settings.state_path, check_sandbox_id(sandbox_id))
        generation = int(directory.read_state().get("generation", 0))
        return with_socket_prefix(
            directory.read_connection_file(), directory.socket_prefix_of(generation)
        )

    async def attach(self, owner: str, sandbox_id: str) -> Sandbox:
        """Reconnect to a running sandbox's kernel (after a proxy restart, or by context)."""
        await self.host.get(owner, sandbox_id)
        return await self.wait_for_kernel(
            sandbox_id, SandboxDirectory(self.host.settings.state_path, sandbox_id)
        )

    async def attach_claimed(self, owner: str, sandbox_id: str, timeout: float) -> Sandbox:
        """Connect to a pool member just claimed: it must be ``owner``'s, running, and answer
        kernel_info within ``timeout`` seconds (SandboxError otherwise)."""
        directory = SandboxDirectory(self.host.settings.state_path, check_sandbox_id(sandbox_id))
        recorded = directory.read_state().get("container")
        if recorded is None:  # made by an older version: ask the engine
            info = await self.host.get(owner, sandbox_id)
        else:
            # The kernel's answer below proves the container runs; the engine is not asked,
            # so a warm start needs no engine client at all.
            info = SandboxInfo(**recorded)
        if info.owner != owner:
            raise SandboxNotFoundError(f"no sandbox {sandbox_id}")
        if not info.running:
            raise SandboxStartError(f"sandbox {sandbox_id} is not running: {info.death_cause()}")
        return await self.wait_for_kernel(sandbox_id, directory, timeout, info)

    async def wait_for_kernel(
        self,
        sandbox_id: str,
        directory: SandboxDirectory,
        timeout: float | None = None,
        info: SandboxInfo | None = None,
    ) -> Sandbox:
        state = directory.read_state()
        host_connection = self.kernel_connection(sandbox_id)
        reply = await wait_until_ready(
            host_connection,
            timeout=self.host.settings.start_timeout if timeout is None else timeout,
            still_running=lambda: self._why_not_running(sandbox_id),
        )
        if info is None:
            info = await self.host.backend.inspect(sandbox_id)
        limits = SandboxLimits.parse(**state["limits"])
        workspace = state.get("workspace") or {}
        plan = WorkspacePlan(workspace.get("mode", "none"), None, workspace.get("note", ""))
        return Sandbox(info, limits, host_connection, reply, plan)

    async def _why_not_running(self, sandbox_id: str) -> str | None:
        try:
            info = await self.host.backend.inspect(sandbox_id)
        except SandboxNotFoundError:
            return "its container is gone"
        if info.running:
            return None
        tail = (await self.host.backend.logs(sandbox_id, tail=20)).strip()
        return info.death_cause() + (f"; its last output:\n{tail}" if tail else "")
