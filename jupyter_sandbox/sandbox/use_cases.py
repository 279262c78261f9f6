"""What a front end asks of the core, one call each: the use-case layer.

A front end (the REST handlers in server_extension/, the E2B-compatible API in e2b_api/, the
CLI in cli/; the MCP server reaches them through the REST client) parses its own request into
the records here, checks its owner, calls one function, and translates what comes back. What a
request *means* is decided here, once, not in each front end:

- :func:`create_sandbox`: a new sandbox with a context (refused when the context has a sandbox
  already), restored from a snapshot, with metadata, a deadline and a network policy
  (:class:`NewSandbox`). Metadata, the deadline and the front end's own facts are written with
  the sandbox: into the same state file write that makes it, or claims it from the warm pool
  (``SandboxStarter.create``'s ``record``), so no sandbox is ever seen, by a listing, the
  culler or a crash, without them. A failed step after the start (a network policy that cannot
  be applied, a snapshot that cannot be restored) removes the sandbox it made.
- :func:`restart_sandbox`: a fresh interpreter in a sandbox, unless a kernel process holds it,
  whose own restart is the only one that keeps it working (REST, the CLI).
- :func:`resume_sandbox`: a paused sandbox running again with a deadline anew (the E2B API's
  automatic resume); :func:`set_deadline`: a new deadline (REST, the E2B API).

Functions over SandboxManager rather than more of its methods, because a use case combines
parts the manager does not have: the deadlines are kept by the server's culler (a
:class:`Deadlines`), which the CLI and a kernel process do not run, and the manager stays the
owner of the sandboxes' parts rather than also of every front end's request. Starting a kernel's
own sandbox is not here: the proxy kernel finds or makes its context's sandbox under that
context's lock (kernel/obtaining.py), where a new one is plain ``SandboxManager.create``.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from jupyter_sandbox.protocol.errors import InvalidRequestError, SandboxConflictError
from jupyter_sandbox.sandbox.host.state_record import SandboxState
from jupyter_sandbox.sandbox.lifecycle.contexts import kernel_attached

if TYPE_CHECKING:
    from jupyter_sandbox.sandbox.manager import SandboxManager
    from jupyter_sandbox.sandbox.sandbox_types import Sandbox


class Deadlines(Protocol):
    """What keeps sandboxes' deadlines: the server's culler (SandboxCuller, lifecycle/culler.py)."""

    def expiry(self, state: SandboxState, timeout: float) -> datetime.datetime:
        """The deadline ``timeout`` seconds from now for a sandbox with ``state`` ({} for one
        about to be made); InvalidRequestError if it would outlast the time to live."""
        ...

    def deadline_changed(self, deadline: datetime.datetime) -> None:
        """A deadline was recorded: the culler comes by then."""
        ...


@dataclass(frozen=True)
class NewSandbox:
    """What a front end asks of a new sandbox; each field left out takes the settings' default.

    The front ends' own request records derive from it (server_extension/requests.py's
    ``CreateRequest`` parses the REST body into one).
    """

    runtime: str | None = None  # "runsc" or "runc"
    image: str | None = None  # one SandboxSettings.allowed_images allows
    limits: dict[str, Any] = field(default_factory=dict)  # by name (SandboxLimits)
    context: str | None = None  # a name to find it by; refused if it has a sandbox already
    environment: dict[str, str] = field(default_factory=dict)  # added to the sandbox's own
    network: Any = None  # its policy (network/policy.py); None: NetworkSettings.default_policy
    snapshot: str | None = None  # restore this workspace snapshot into its /workspace
    timeout: float | None = None  # seconds until the culler ends it; None: the ttl alone
    metadata: dict[str, str] = field(default_factory=dict)  # shown with it, filtered on
    purpose: str = ""  # the note on its container (who made it)
    # Facts of the front end kept in the state file with the sandbox (the E2B API's template).
    record: dict[str, Any] = field(default_factory=dict)


async def create_sandbox(
    manager: SandboxManager,
    owner: str,
    request: NewSandbox,
    deadlines: Deadlines | None = None,
) -> Sandbox:
    """A new sandbox of ``owner`` as ``request`` says, whose kernel answers.

    Refused before anything starts: a timeout beyond the culler's time to live (and any timeout
    without ``deadlines``: InvalidRequestError), a context that has a sandbox already
    (SandboxConflictError), a missing snapshot (SandboxNotFoundError). The metadata, deadline
    and ``request.record`` are in the sandbox's state from its first write; a failed restore or
    network policy removes the new sandbox again.
    """
    record = dict(request.record)
    if request.metadata:
        record["metadata"] = dict(request.metadata)
    expires = None
    if request.timeout is not None:  # counted from this request
        if deadlines is None:
            raise InvalidRequestError("a sandbox's timeout needs a server to keep it")
        expires = deadlines.expiry({}, request.timeout)
        record["expires"] = expires.isoformat()
    if request.context is not None:
        existing = await manager.find_context(owner, request.context)
        if existing is not None:
            raise SandboxConflictError(
                f"context '{request.context}' already has sandbox {existing.sandbox_id}: "
                "use it, or delete it first"
            )
    options: dict[str, Any] = {
        "runtime": request.runtime,
        "image": request.image,
        "limits": request.limits,
        "environment": request.environment,
        "context": request.context,
        "purpose": request.purpose,
        "network": request.network,
        "record": record,
    }
    if request.snapshot is None:
        sandbox = await manager.create(owner, **options)
    else:  # its files restored into the new sandbox, which goes again if that fails
        sandbox = await manager.snapshots.create_sandbox(owner, request.snapshot, **options)
    if expires is not None and deadlines is not None:
        deadlines.deadline_changed(expires)
    return sandbox


async def restart_sandbox(
    manager: SandboxManager,
    owner: str,
    sandbox_id: str,
    restart_attached: Callable[[SandboxState], Awaitable[bool]] | None = None,
) -> None:
    """A fresh interpreter in ``owner``'s running sandbox; files in /workspace stay.

    A sandbox no kernel process holds is restarted here (SandboxManager.restart_kernel). One a
    kernel holds is restarted only through that kernel, whose proxy restarts the interpreter and
    reattaches (restarting under it would leave it relaying to nothing): ``restart_attached``,
    given the sandbox's state, is the front end's way to do that, True when it did (the server
    restarts a Jupyter kernel it runs); otherwise SandboxConflictError. A paused or stopped
    sandbox is a SandboxConflictError too (SandboxManager.restartable).
    """
    await manager.restartable(owner, sandbox_id)
    state = manager.read_state(sandbox_id)
    if not kernel_attached(manager.settings.state_path, state):
        await manager.restart_kernel(owner, sandbox_id)
        return
    if restart_attached is not None and await restart_attached(state):
        return
    raise SandboxConflictError(
        f"sandbox {sandbox_id} is in use by a running kernel: restart that kernel from its own "
        "client (JupyterLab, or KernelManager.restart_kernel)"
    )


async def resume_sandbox(
    manager: SandboxManager,
    owner: str,
    sandbox_id: str,
    timeout: float | None,
    deadlines: Deadlines,
) -> None:
    """Resume ``owner``'s paused sandbox (one another request resumed just now is fine) and
    give it a deadline ``timeout`` seconds from now (None: it keeps the one it has); it is no
    longer marked as paused at its timeout."""
    with contextlib.suppress(SandboxConflictError):  # resumed meanwhile: running is the point
        await manager.resume(owner, sandbox_id)
    manager.update_state(sandbox_id, paused_at_timeout=None)
    if timeout is not None:
        set_deadline(manager, sandbox_id, timeout, deadlines)


def set_deadline(
    manager: SandboxManager, sandbox_id: str, timeout: float, deadlines: Deadlines
) -> datetime.datetime:
    """Record that the sandbox goes ``timeout`` seconds from now (sooner or later than it would
    have, within the time to live), and have the culler come by then."""
    expires = deadlines.expiry(manager.read_state(sandbox_id), timeout)
    manager.update_state(sandbox_id, expires=expires.isoformat())
    deadlines.deadline_changed(expires)
    return expires
