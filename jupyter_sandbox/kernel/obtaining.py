"""Which sandbox a proxy kernel relays to: its context's, found again, or a new one.

The proxy kernel (proxy_kernel.py) takes the context's lock first, then calls :func:`find_or_create`
with what the kernel asks for (kernel_request.py): a sandbox already running for the owner's
context is reattached if it is what the kernel asks for, otherwise one is created for the
context.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from jupyter_sandbox.kernel.kernel_request import KernelRequest
from jupyter_sandbox.sandbox.host.clock import now_iso
from jupyter_sandbox.sandbox.manager import Sandbox, SandboxManager

log = logging.getLogger(__name__)


def unnamed_context(connection_file: Path) -> str:
    """The context of a kernel without JUPYTER_SANDBOX_CONTEXT: one per connection file, which
    jupyter_client keeps across restarts, so a restart finds the same sandbox."""
    return "kernel-" + hashlib.sha256(str(connection_file).encode()).hexdigest()[:16]


async def find_or_create(
    manager: SandboxManager,
    owner: str,
    key: str,
    connection_file: Path,
    request: KernelRequest,
    *,
    named: bool,
) -> Sandbox:
    """The sandbox of ``owner``'s context ``key`` (whose lock the caller holds), reattached or
    created, and recorded as this kernel's. ``named``: the user named the context
    (JUPYTER_SANDBOX_CONTEXT); else it is an unnamed kernel's own, whose sandbox is removed
    when the kernel shuts down."""
    existing = await manager.find_context(owner, key)
    if existing is not None:
        request.check_found(manager, existing, key, named=named)
        if not named and used_by_a_kernel_before(manager, existing.sandbox_id):
            sandbox = await manager.restart_kernel(owner, existing.sandbox_id)
            log.info(
                "kernel reattached to sandbox %s with a fresh interpreter: the kernel before "
                "this one ended without a restart (killed, or restarted with now=True)",
                existing.sandbox_id,
            )
        else:
            sandbox = await manager.attach(owner, existing.sandbox_id)
            log.info("kernel reattached to sandbox %s (context %s)", existing.sandbox_id, key)
    else:
        sandbox = await manager.create(
            owner,
            runtime=request.runtime,
            image=request.image,
            limits=request.limits,
            context=key,
            ephemeral=not named,
            launch_dir=os.getcwd(),
            workspace_root=request.workspace_root,
            notebook=request.notebook,
            purpose=request.purpose,
            network=request.network,  # a context found keeps its own
        )
    manager.update_state(
        sandbox.sandbox_id,
        kernel_pid=os.getpid(),
        # the interpreter this process relays to (see used_by_a_kernel_before)
        kernel_generation=int(manager.read_state(sandbox.sandbox_id).get("generation", 0)),
        # jupyter_client names connection files kernel-<id>.json
        kernel_id=connection_file.stem.removeprefix("kernel-"),
        attached=now_iso(),
        notebook=request.notebook,
    )
    return sandbox


def used_by_a_kernel_before(manager: SandboxManager, sandbox_id: str) -> bool:
    """Whether a kernel process already relayed to the sandbox's current interpreter.

    An unnamed kernel's next process finds its sandbox again, but Jupyter promises a fresh
    interpreter with every new kernel process. A restart asked by shutdown_request gives one
    (the generation moves on before the next process attaches); a kernel process killed
    instead (``restart_kernel(now=True)``, which agent code uses on a hung kernel, or
    Jupyter's restarter after the process died) leaves the old one, maybe hung, which the next
    process must restart rather than reattach. Named contexts keep theirs: that is their use.
    """
    state = manager.read_state(sandbox_id)
    attached = state.get("kernel_generation")
    return attached is not None and int(attached) == int(state.get("generation", 0))
