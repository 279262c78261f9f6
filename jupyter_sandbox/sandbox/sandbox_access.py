"""What the core's parts need of the sandboxes: narrow views of SandboxManager, as protocols.

The operations (files, commands, background commands, ports, terminals), the lifecycle (the warm
pool's claim, the reaper), snapshots, the attestation and the doctor are handed the manager, but
name it by one of these protocols rather than by its class: each needs a handful of its calls,
and the manager builds most of them, so naming its class would make each import the other (an
import cycle, tests/test_import_cycles.py). SandboxManager satisfies both structurally; nothing
registers with them.

- :class:`SandboxLookup`: the settings, the backend and finding an owner's sandbox: what
  connecting to a kernel needs (SandboxAttacher, kernel_link/attaching.py).
- :class:`SandboxHost`: what starting a sandbox has at hand: that, what identifies the
  backend, the state file, reaching a claimed pool member's kernel and removing a sandbox; what
  the warm pool's claim and the attestation need. SandboxStarter (starting.py) is handed the
  manager as one, and hands it on to them.
- :class:`SandboxAccess`: that, and the sandboxes of one state directory as they are: finding
  one (any status, or running), running a command in one, its use (activity, for the idle
  culler); what the operations on a sandbox and the reaper need.
- :class:`SandboxLifecycle`: that, and making sandboxes and reattaching to their kernels: what
  snapshots and the doctor's smoke test need.
- :class:`SandboxKernels`: :class:`SandboxAccess`, and clients of the sandboxes' kernels: what a
  code run needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # names for the type checker only: this module is imported by the parts
    from typing_extensions import Unpack  # typing's own from Python 3.11

    from jupyter_sandbox.sandbox.backends.base import ExecOptions, SandboxBackend
    from jupyter_sandbox.sandbox.backends.records import ExecResult, SandboxInfo
    from jupyter_sandbox.sandbox.host.state_record import SandboxState
    from jupyter_sandbox.sandbox.kernel_link.clients import KernelClients
    from jupyter_sandbox.sandbox.lifecycle.usage import SandboxUsage
    from jupyter_sandbox.sandbox.sandbox_types import Sandbox
    from jupyter_sandbox.sandbox.settings import SandboxSettings


class SandboxLookup(Protocol):
    """The settings, the backend (made on first use), and an owner's sandbox by its id
    (SandboxNotFoundError for another owner's)."""

    settings: SandboxSettings

    @property
    def backend(self) -> SandboxBackend: ...

    async def get(self, owner: str, sandbox_id: str) -> SandboxInfo: ...


class SandboxHost(SandboxLookup, Protocol):
    """:class:`SandboxLookup`, the state file; a claimed member's kernel; removal."""

    def backend_key(self) -> dict[str, Any]:
        """The backend's class and configuration, for the warm pool's key."""
        ...

    def update_state(self, sandbox_id: str, **changes: Unpack[SandboxState]) -> SandboxState: ...

    async def attach_claimed(self, owner: str, sandbox_id: str, timeout: float) -> Sandbox: ...

    async def remove(self, owner: str, sandbox_id: str) -> None: ...


class SandboxAccess(SandboxHost, Protocol):
    """The sandboxes of one state directory, as the operations on a sandbox use them.

    Every call that takes an ``owner`` treats another owner's sandbox as a missing one
    (SandboxNotFoundError); ``running`` also raises SandboxConflictError, naming the fix, for a
    sandbox that is not running.
    """

    usage: SandboxUsage

    async def running(self, owner: str, sandbox_id: str) -> SandboxInfo: ...

    async def exec(
        self, owner: str, sandbox_id: str, argv: list[str], options: ExecOptions | None = None
    ) -> ExecResult: ...

    def holds(self, info: SandboxInfo) -> bool:
        """Whether ``info``'s sandbox belongs to this state directory (see SandboxManager)."""
        ...

    def read_state(self, sandbox_id: str) -> SandboxState: ...


class SandboxLifecycle(SandboxAccess, Protocol):
    """:class:`SandboxAccess`, and making sandboxes and reattaching to their kernels."""

    async def create(self, owner: str, *args: Any, **options: Any) -> Sandbox:
        """A new sandbox whose kernel answers (SandboxManager.create: its keywords)."""
        ...

    async def attach(self, owner: str, sandbox_id: str) -> Sandbox: ...


class SandboxKernels(SandboxAccess, Protocol):
    """:class:`SandboxAccess`, and the clients of the sandboxes' kernels kept between runs."""

    kernel_clients: KernelClients

    def kernel_connection(self, sandbox_id: str) -> dict[str, Any]:
        """The host's connection info of the sandbox's current kernel."""
        ...
