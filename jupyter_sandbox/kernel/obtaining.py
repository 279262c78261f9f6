"""Which sandbox a proxy kernel relays to: its context's, found again, or a new one.

The proxy kernel (proxy.py) takes the context's lock first, then calls :func:`find_or_create`:
a sandbox already running for the owner's context is reattached (if the runtime and network
the kernel asks for are the ones it has), otherwise one is created for the context. Everything
the kernel asks for comes from its environment, as Jupyter starts it (a kernelspec's ``env``
included): JUPYTER_SANDBOX_RUNTIME, JUPYTER_SANDBOX_IMAGE, JUPYTER_SANDBOX_NETWORK,
JPY_SESSION_NAME and JUPYTER_SANDBOX_PURPOSE.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from ..sandbox import Sandbox, SandboxManager
from ..sandbox.container_spec import now_iso
from ..sandbox.errors import InvalidSettingError
from ..sandbox.network import ENV_VAR as NETWORK_ENV_VAR
from ..sandbox.network import NetworkPolicy, policy_of_state
from ..sandbox.settings import RUNTIMES

log = logging.getLogger(__name__)


def requested_runtime() -> str | None:
    """JUPYTER_SANDBOX_RUNTIME, checked (None: the settings' default)."""
    runtime = os.environ.get("JUPYTER_SANDBOX_RUNTIME") or None
    if runtime is not None and runtime not in RUNTIMES:
        raise InvalidSettingError(
            f"JUPYTER_SANDBOX_RUNTIME must be 'runsc' (gVisor) or 'runc', not {runtime!r}"
        )
    return runtime


def requested_image() -> str | None:
    """JUPYTER_SANDBOX_IMAGE (None: the settings' image); the settings' ``allowed_images``
    decide whether it may be used, when the sandbox is created."""
    return os.environ.get("JUPYTER_SANDBOX_IMAGE") or None


def unnamed_context(connection_file: Path) -> str:
    """The context of a kernel without JUPYTER_SANDBOX_CONTEXT: one per connection file, which
    jupyter_client keeps across restarts, so a restart finds the same sandbox."""
    return "kernel-" + hashlib.sha256(str(connection_file).encode()).hexdigest()[:16]


async def find_or_create(
    manager: SandboxManager,
    owner: str,
    key: str,
    connection_file: Path,
    runtime: str | None,
    *,
    named: bool,
    image: str | None = None,
) -> Sandbox:
    """The sandbox of ``owner``'s context ``key`` (whose lock the caller holds), reattached or
    created, and recorded as this kernel's. ``named``: the user named the context
    (JUPYTER_SANDBOX_CONTEXT); else it is an unnamed kernel's own, whose sandbox is removed
    when the kernel shuts down."""
    existing = await manager.find_context(owner, key)
    if existing is not None:
        if runtime is not None and existing.runtime != runtime:
            raise InvalidSettingError(
                f"context '{key}' runs under {existing.runtime}, not {runtime}: shut it down "
                "first, or use another JUPYTER_SANDBOX_CONTEXT"
            )
        if image is not None and existing.image != image:
            raise InvalidSettingError(
                f"context '{key}' runs image {existing.image}, not {image}: shut it down "
                "first, or use another JUPYTER_SANDBOX_CONTEXT"
            )
        if named:
            check_network_of(manager, existing.sandbox_id, key)
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
            runtime=runtime,
            image=image,
            context=key,
            ephemeral=not named,
            launch_dir=os.getcwd(),
            notebook=os.environ.get("JPY_SESSION_NAME", ""),
            purpose=os.environ.get("JUPYTER_SANDBOX_PURPOSE", ""),
            network=os.environ.get(NETWORK_ENV_VAR),  # a context found keeps its own
        )
    manager.update_state(
        sandbox.sandbox_id,
        kernel_pid=os.getpid(),
        # the interpreter this process relays to (see used_by_a_kernel_before)
        kernel_generation=int(manager.read_state(sandbox.sandbox_id).get("generation", 0)),
        # jupyter_client names connection files kernel-<id>.json
        kernel_id=connection_file.stem.removeprefix("kernel-"),
        attached=now_iso(),
        notebook=os.environ.get("JPY_SESSION_NAME", ""),
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


def check_network_of(manager: SandboxManager, sandbox_id: str, context: str) -> None:
    """A named context asked for with another network policy than its sandbox has is refused,
    not reused with the wrong network (checklist row 36). An unnamed one is a kernel
    restarting: the policy it has now (perhaps changed live) is kept, so it is not checked."""
    requested = os.environ.get(NETWORK_ENV_VAR)
    if not requested:
        return
    wanted = NetworkPolicy.from_text(requested)
    current = policy_of_state(manager.read_state(sandbox_id))
    if wanted != current:
        raise InvalidSettingError(
            f"context '{context}' has network policy {current.describe()}, not "
            f"{wanted.describe()}: change it with PUT /api/sandboxes/{sandbox_id}/network, "
            "shut the context down first, or use another JUPYTER_SANDBOX_CONTEXT"
        )
