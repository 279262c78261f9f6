"""The warm pool: sandboxes started ahead of time, so that a kernel start is only a claim.

A runsc sandbox takes seconds to start; a claim takes a host-side file operation, a state update
and one kernel_info round trip. Mounts, limits, environment and the owner label are fixed when a
container is created, so a pool member can only serve a request that would have created the very
same container: the **pool key** hashes all of it (owner, runtime, image, limits, environment,
workspace mode and launch directory, and the hardening settings).

Layout under the state directory (all host-only, 0700)::

    pool/<key>/<sandbox id>       ticket: the member is started, its kernel answered, unclaimed
    pool/wanted/<key>.json        a request that missed: the refiller keeps its key warm too
    pool/refill-<owner>.lock      flock held by the process that keeps the owner's pool warm
    <sandbox id>/claimed          claim marker, made with O_EXCL: exactly one claimer wins

A claim is the exclusive creation of the member's claim marker; only then is its ticket removed,
its state file given the claimer's context (``claimed`` records when) and its kernel asked for
kernel_info. So concurrent kernel starts, in any processes, never share a sandbox, with or
without a server running. A member that turns out dead is removed and the next ticket tried; no
ticket at all means a normal start. Drain and the refiller take members with the same marker
before removing them, so they never remove a member a kernel has just claimed.

The files under ``pool/`` are made and read by :class:`~.pool_directory.PoolDirectory`
(pool_directory.py). Claims happen in whatever process creates a sandbox (the proxy kernel, the
server's REST handlers, agent code). Filling needs a long-lived process: ``WarmPool``
(pool_filler.py), which the server extension starts and drains. The reaper spares members with a
ticket, and reaps a member whose claimer died between taking it and recording the claim (see
:func:`is_stale_member`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_sandbox._version import __version__
from jupyter_sandbox.protocol.errors import SandboxError
from jupyter_sandbox.sandbox.host.clock import now_iso
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory, age_of
from jupyter_sandbox.sandbox.host.state_record import SandboxState
from jupyter_sandbox.sandbox.lifecycle.pool_directory import PoolDirectory, is_pool_key

if TYPE_CHECKING:
    from jupyter_sandbox.sandbox.sandbox_access import SandboxHost
    from jupyter_sandbox.sandbox.sandbox_types import Sandbox, SandboxRequest
    from jupyter_sandbox.sandbox.settings import SandboxSettings

log = logging.getLogger(__name__)

CLAIM_MARKER = "claimed"
# Seconds a claimed member's kernel gets to answer kernel_info; it answered once already, so a
# member that takes longer is treated as dead.
CLAIM_TIMEOUT = 10.0


# -- keys and members ------------------------------------------------------------------------


def pool_key(settings: SandboxSettings, request: SandboxRequest, backend: dict[str, Any]) -> str:
    """The key of every pool member that can serve ``request``: a hash of whatever is fixed at
    container creation (the request, the settings that shape the container spec, and the
    backend: its class and configuration, SandboxManager.backend_key)."""
    facts = {
        "version": __version__,
        "owner": request.owner,
        "runtime": request.runtime,
        "backend": backend,
        "image": request.image,
        "limits": request.limits.as_settings(),
        "environment": request.environment,
        "workspace": [
            request.workspace.mode,
            request.workspace.source,
            request.workspace.note,
            request.workspace.within,
        ],
        "uid": settings.effective_uid,
        "read_only_root": settings.read_only_root,
        "memory_snapshots": settings.memory_snapshots,
        "runsc_host_pids_limit": settings.runsc_host_pids_limit,
        "stop_timeout": settings.stop_timeout,
        "log_max_size": settings.log_max_size,
    }
    # repr: a configuration may hold values JSON has no form for (a class named by itself).
    text = json.dumps(facts, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def take(directory: SandboxDirectory, by: str) -> bool:
    """Claim the member in ``directory``: True for exactly one caller, whoever calls first."""
    try:
        fd = os.open(directory.root / CLAIM_MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except (FileExistsError, FileNotFoundError):  # taken already, or the member is gone
        return False
    try:
        os.write(fd, f"{by} {os.getpid()}".encode())
    finally:
        os.close(fd)
    return True


def unclaimed_member(state: SandboxState) -> bool:
    """Whether a sandbox's state says it is a pool member no kernel has claimed (yet).

    Such a sandbox holds no user data and has no context: listings and the idle culler
    should leave it to the pool."""
    return bool(state.get("pool")) and not state.get("claimed")


def is_stale_member(
    state_dir: Path, directory: SandboxDirectory, state: SandboxState, grace: float
) -> bool:
    """Whether ``directory`` (whose state is ``state``) is an unclaimed pool member that nobody
    will ever claim.

    A member with a ticket waits for its claimer while a refiller keeps its owner's pool (holds
    the refill lock, from before its first member until its drain removed the last); once that
    process is gone without draining (a server killed), nobody will refill, drain or reach the
    member, and it is stale at once. A taken member whose claim was not recorded within
    ``grace`` seconds lost its claimer (the process died between taking it and updating its
    state). A member without ticket or claim marker is stale once its state is ``grace``
    seconds old (a member being started gets its ticket within start_timeout).
    """
    key = state.get("pool")
    if not unclaimed_member(state) or not isinstance(key, str):
        return False
    marker = directory.root / CLAIM_MARKER
    if marker.exists():
        return age_of(marker) >= grace
    pool_dir = PoolDirectory(state_dir)
    if pool_dir.has_ticket(key, directory.root.name):
        return not pool_dir.refiller_running(str(state.get("owner", "")))
    return age_of(directory.state_file) >= grace


def forget_member(state_dir: Path, sandbox_id: str, state: SandboxState) -> None:
    """Remove the ticket of a member that is being removed (if it was one)."""
    key = state.get("pool")
    if isinstance(key, str) and is_pool_key(key):
        PoolDirectory(state_dir).remove_ticket(key, sandbox_id)


def remove_stale_tickets(state_dir: Path, grace: float) -> list[str]:
    """Remove tickets whose sandbox directory is gone; return their sandbox ids."""
    pool_dir = PoolDirectory(state_dir)
    removed = []
    for key in pool_dir.pool_keys():
        for sandbox_id in pool_dir.tickets(key):
            ticket = pool_dir.root / key / sandbox_id
            if not (state_dir / sandbox_id).is_dir() and age_of(ticket) >= grace:
                pool_dir.remove_ticket(key, sandbox_id)
                removed.append(sandbox_id)
    return removed


# -- claiming (any process) ------------------------------------------------------------------


async def claim(
    manager: SandboxHost,
    request: SandboxRequest,
    *,
    context: str | None,
    ephemeral: bool,
    notebook: str,
    record: dict[str, Any] | None = None,
) -> Sandbox | None:
    """A warm member for ``request``, now holding the caller's context and ``record`` (written
    by the claim's one state update, SandboxStarter.create); None when there is none.

    Dead members met on the way are removed. Costs no engine call when the pool is empty.
    """
    state_dir = manager.settings.state_path
    pool_dir = PoolDirectory(state_dir)
    key = pool_key(manager.settings, request, manager.backend_key())
    for sandbox_id in pool_dir.tickets(key):
        directory = SandboxDirectory(state_dir, sandbox_id)
        if not take(directory, "claim"):
            if not directory.exists():
                pool_dir.remove_ticket(key, sandbox_id)
            continue
        pool_dir.remove_ticket(key, sandbox_id)
        state = directory.read_state()
        if state.get("owner") != request.owner or state.get("pool") != key:
            log.error("pool member %s does not match its ticket; left alone", sandbox_id)
            continue
        now = now_iso()
        directory.update_state(
            **(record or {}),
            context=context,
            ephemeral=ephemeral,
            notebook=notebook,
            last_activity=now,
            claimed=now,
        )
        try:
            sandbox = await manager.attach_claimed(request.owner, sandbox_id, CLAIM_TIMEOUT)
        except SandboxError as exc:
            log.warning("pool member %s is unusable (%s); removing it", sandbox_id, exc.message)
            await manager.remove(request.owner, sandbox_id)
            directory.remove()
            continue
        except BaseException:
            await asyncio.shield(manager.remove(request.owner, sandbox_id))
            raise
        log.info("sandbox %s claimed from the warm pool by %s", sandbox_id, request.owner)
        return sandbox
    return None


def record_wanted(state_dir: Path, request: SandboxRequest) -> None:
    """Note a request that missed, so that a running refiller keeps its key warm too.

    Only while a refiller for the owner runs, and never for a request with its own environment
    variables (they may be secrets: nothing of them is written to disk).
    """
    pool_dir = PoolDirectory(state_dir)
    if request.custom_environment or not pool_dir.refiller_running(request.owner):
        return
    # pool_key() needs the settings; the record's file is named by the refiller's own key of it.
    record = {
        "owner": request.owner,
        "runtime": request.runtime,
        "image": request.image,
        "limits": request.limits.as_settings(),
        "launch_dir": request.launch_dir,
    }
    name = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:16]
    try:
        pool_dir.record_wanted(name, record)
    except OSError as exc:
        log.warning("cannot record a wanted pool key: %s", exc)
