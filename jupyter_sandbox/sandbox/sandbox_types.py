"""The values that cross the manager's boundary: a request going in, a sandbox coming out.

:class:`RequestedSandbox` is what a caller asks for (``SandboxManager.create``'s keywords),
unchecked. :class:`SandboxRequest` is made only by ``SandboxManager.check_request``
(starting.py), so holding one means the owner, runtime, limits, environment and workspace have
been checked and the settings' defaults filled in. The warm pool hashes it into a pool key (pool.py) and the
manager starts a container from it. :class:`Sandbox` is what ``create``, ``attach`` and a pool
claim return once the sandbox's kernel has answered: the proxy kernel connects to the kernel
with its ``connection_info`` (through pinned sockets, socket_pin.py), and so may agent code that
uses the manager directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

from jupyter_sandbox.sandbox.backends.records import SandboxInfo
from jupyter_sandbox.sandbox.limits import SandboxLimits
from jupyter_sandbox.sandbox.workspace.plan import NO_WORKSPACE, WorkspacePlan


class RequestedSandbox(TypedDict, total=False):
    """What a caller may ask of a new sandbox; each left out or None takes the settings'."""

    runtime: str | None  # "runsc" or "runc"
    image: str | None  # one SandboxSettings.allowed_images allows
    limits: dict[str, Any] | None  # by name, as SandboxLimits.with_overrides takes them
    environment: dict[str, str] | None  # added to the sandbox's own
    launch_dir: str | None  # the directory /workspace shows (SandboxSettings.workspace_mode)
    workspace_root: str | None  # a real path launch_dir must stay in (host/workspace_pin.py)


class ClaimOptions(TypedDict, total=False):
    """What a new or claimed sandbox holds for its caller (SandboxStarter.create says what
    each means): SandboxManager.claim_from_pool's keywords."""

    context: str | None
    ephemeral: bool
    notebook: str
    record: dict[str, Any] | None


class StartOptions(ClaimOptions, total=False):
    """SandboxManager.start_sandbox's keywords (SandboxStarter.start_sandbox)."""

    purpose: str
    pool_key: str | None


class CreateOptions(RequestedSandbox, ClaimOptions, total=False):
    """SandboxManager.create's keywords (SandboxStarter.create says what each means)."""

    purpose: str
    network: Any


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
