"""Remove what a crash left behind: containers without state, failed starts, stray state, and
the context lock files of kernels that were killed.

"Ours" means a labelled container whose host directory lies under this manager's state
directory, so two host users sharing one engine never reap each other's sandboxes. The engine is
the truth for existence: a host directory without a container is stale, and a container without
its host directory (or whose kernel has exited, unless a memory snapshot stopped it) is an
orphan. Warm pool members waiting with a ticket are left alone while a refiller runs; one that
lost its claimer or its refiller (see pool.is_stale_member) is reaped. A sandbox made with a
timeout (``expires``: ``POST /api/sandboxes``, the Python client, ``PUT .../timeout``) is reaped
once past it: a server's culler removes it then, and with that server killed nothing else would.

Nothing runs a pass unless something starts: the server (at start and periodically), and, with
no server at all, the start of a kernel and every ``jupyter sandbox`` verb that acts on
sandboxes call :func:`sweep_orphans`. A killed unnamed kernel's sandbox is removed sooner, by
its lifeline (lifeline.py); a pass is the backstop for what no lifeline reached.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from jupyter_sandbox.protocol.errors import SandboxError
from jupyter_sandbox.sandbox.backends.records import SandboxInfo
from jupyter_sandbox.sandbox.host.clock import parse_iso
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory, age_of
from jupyter_sandbox.sandbox.host.state_record import SandboxState
from jupyter_sandbox.sandbox.host.timeouts import within
from jupyter_sandbox.sandbox.identity import is_sandbox_id
from jupyter_sandbox.sandbox.lifecycle import pool
from jupyter_sandbox.sandbox.lifecycle.contexts import (
    ContextLock,
    kernel_attached,
    lock_path,
    remove_free_lock_files,
)
from jupyter_sandbox.sandbox.lifecycle.quotas import counts_toward_quota
from jupyter_sandbox.sandbox.sandbox_access import SandboxAccess

log = logging.getLogger(__name__)

DEAD_STATES = frozenset({"exited", "dead"})

# How many removals one pass (the reaper's, the culler's) runs at once: a wedged container
# holds one of them, not the whole pass; kept well under the engine threads one owner may hold
# (the passes work as the owner "", engine.py).
REMOVALS_AT_ONCE = 4
# Seconds one removal of a pass may take. Longer than the Docker backend's own limits for a
# wedged container (removal.py) with its default engine time limit, so only a removal stuck
# past them is given up; the next pass tries it again.
REMOVAL_DEADLINE = 300.0


@dataclass
class ReapReport:
    """What one pass removed."""

    containers: list[str] = field(default_factory=list)
    directories: list[str] = field(default_factory=list)
    processes: list[int] = field(default_factory=list)
    tickets: list[str] = field(default_factory=list)  # warm pool tickets of removed sandboxes
    locks: list[str] = field(default_factory=list)  # context lock files killed kernels left

    def __bool__(self) -> bool:
        return bool(
            self.containers or self.directories or self.processes or self.tickets or self.locks
        )


async def reap_orphans(manager: SandboxAccess, *, grace: float | None = None) -> ReapReport:
    """One reaping pass. ``grace`` (seconds, default the start timeout) spares young starts.

    A sandbox being created right now has a directory before its container, and a ``created``
    container before it runs; anything younger than ``grace`` is left for the next pass.
    """
    state_dir = manager.settings.state_path
    grace = manager.settings.start_timeout if grace is None else grace
    report = ReapReport()
    containers = await manager.backend.list_sandboxes()
    ours = [c for c in containers if manager.holds(c)]
    removals: dict[str, Callable[[], Awaitable[None]]] = {}
    for info in ours:
        directory = SandboxDirectory(state_dir, info.sandbox_id)
        # One reading of the state for every decision below (and the pool's clean-up).
        state = directory.read_state()
        reason = orphan_reason(manager, info, state, grace)
        if reason is None:
            continue
        untaken = not (directory.root / pool.CLAIM_MARKER).exists()
        # Taken as a claimer takes it: a kernel claiming it this moment keeps it.
        if reason == STALE_MEMBER and untaken and not pool.take(directory, by="reaper"):
            continue
        log.info(
            "reaping sandbox %s (%s, %s, host directory %s)",
            info.sandbox_id,
            info.status,
            reason,
            "present" if directory.exists() else "gone",
        )
        removals[info.sandbox_id] = _reaping(manager, info.sandbox_id, directory, state)
    report.containers = await remove_each(removals, "reaping pass")

    known = {c.sandbox_id for c in containers}
    if state_dir.is_dir():
        for entry in state_dir.iterdir():
            if not is_sandbox_id(entry.name):  # e.g. locks/, pool/
                continue
            if entry.is_dir() and entry.name not in known and age_of(entry) >= grace:
                log.info("removing stale sandbox directory %s", entry)
                SandboxDirectory(state_dir, entry.name).remove()
                manager.usage.forget(entry.name)
                report.directories.append(entry.name)

    report.tickets = pool.remove_stale_tickets(state_dir, grace)
    report.locks = remove_free_lock_files(state_dir, grace)
    report.processes = await manager.backend.end_stray_runtime_processes()
    return report


STALE_MEMBER = "a warm-pool member nobody refills or claims"


def _reaping(
    manager: SandboxAccess, sandbox_id: str, directory: SandboxDirectory, state: SandboxState
) -> Callable[[], Awaitable[None]]:
    async def reap() -> None:
        await manager.backend.remove(sandbox_id)
        pool.forget_member(manager.settings.state_path, sandbox_id, state)
        directory.remove()
        manager.usage.forget(sandbox_id)

    return reap


async def remove_each(
    removals: Mapping[str, Callable[[], Awaitable[None]]], what: str
) -> list[str]:
    """Run each of ``removals`` (sandbox id: its removal), :data:`REMOVALS_AT_ONCE` at most at
    once, each within :data:`REMOVAL_DEADLINE`; return the ids removed, in the given order.

    One pass serves every owner: a removal that fails (a SandboxError, such as the engine's
    time limit on a wedged container, or a host directory that will not go) or that outlasts
    its deadline is logged, once, and the others go on. Otherwise one owner's wedged sandbox
    would end every pass before the other owners' expired sandboxes were reached."""
    turns = asyncio.Semaphore(REMOVALS_AT_ONCE)

    async def remove(sandbox_id: str, removal: Callable[[], Awaitable[None]]) -> bool:
        async with turns:
            try:
                await within(removal(), REMOVAL_DEADLINE)
            except asyncio.TimeoutError:  # first: it is an OSError too
                log.warning(
                    "%s: removing sandbox %s did not finish within %g s; the next pass tries again",
                    what,
                    sandbox_id,
                    REMOVAL_DEADLINE,
                )
                return False
            except (SandboxError, OSError) as exc:
                problem = exc.message if isinstance(exc, SandboxError) else str(exc)
                log.warning(
                    "%s: could not remove sandbox %s (%s); the next pass tries again",
                    what,
                    sandbox_id,
                    problem,
                )
                return False
        return True

    removed = await asyncio.gather(*(remove(i, r) for i, r in removals.items()))
    return [sandbox_id for sandbox_id, done in zip(removals, removed, strict=True) if done]


def orphan_reason(
    manager: SandboxAccess, info: SandboxInfo, state: SandboxState, grace: float
) -> str | None:
    """Why the sandbox ``info`` (one of ``manager``'s, whose state is ``state``) is an orphan
    that nothing will use or remove again, or None. ``grace`` (seconds) spares young starts and
    kernels being restarted; ``jupyter sandbox list`` and doctor show the same reasons."""
    state_dir = manager.settings.state_path
    directory = SandboxDirectory(state_dir, info.sandbox_id)
    young = age_of(directory.root) < grace
    if not directory.exists() and not young:
        return "its host directory is gone"
    # A sandbox stopped by its memory snapshot is kept until it is restored or removed.
    if info.status in DEAD_STATES and not state.get("checkpointed"):
        return f"its container {info.status}"
    if info.status == "created" and not young:
        return "its start failed"
    if _abandoned(directory, state, info.owner, grace):
        return "its kernel process is gone"
    if pool.is_stale_member(state_dir, directory, state, grace):
        return STALE_MEMBER
    return past_its_timeout(state_dir, state)


def past_its_timeout(state_dir: Path, state: SandboxState) -> str | None:
    """Why a sandbox made with a timeout (``expires`` in ``state``) goes now that it has passed
    it, or None: the rule of the server's culler (culler.py), which no server may be left to
    apply. Kept, as the culler keeps it, while a kernel attached to it runs a cell; and one
    to be paused at its timeout (``timeout_action`` "pause", E2B's autoPause) is no orphan:
    the next server's culler pauses it."""
    expires = parse_iso(state.get("expires"))
    if expires is None or datetime.datetime.now(datetime.timezone.utc) < expires:
        return None
    if state.get("timeout_action") == "pause":
        return None
    if not counts_toward_quota(state):  # an unclaimed pool member: the pool's own
        return None
    if state.get("busy") and kernel_attached(state_dir, state):
        return None
    return f"past its timeout (it expired at {expires.isoformat(timespec='seconds')})"


async def sweep_orphans(manager: SandboxAccess) -> ReapReport:
    """A reaping pass at the start of something (a kernel, a CLI verb): what it removed.

    Failures are logged, never raised: the sweep must not stop what started it."""
    try:
        report = await reap_orphans(manager)
    except (SandboxError, OSError) as exc:
        log.warning("could not sweep orphaned sandboxes: %s", exc)
        return ReapReport()
    if report.containers:
        log.info("removed orphaned sandbox(es) %s", ", ".join(report.containers))
    return report


def _abandoned(directory: SandboxDirectory, state: SandboxState, owner: str, grace: float) -> bool:
    """An ephemeral sandbox whose kernel process is gone (its context lock is free) and that
    has seen no activity for ``grace`` seconds: a proxy kernel was killed without shutdown.
    A restarting kernel re-takes the lock well within the grace period."""
    context = state.get("context")
    if not state.get("ephemeral") or not context:
        return False
    if ContextLock.is_held(lock_path(directory.root.parent, owner, context)):
        return False
    return age_of(directory.state_file) >= grace
