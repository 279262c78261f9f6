"""Culling: sandboxes idle too long or past their time to live are removed.

Runs inside the server extension, one pass every ``interval`` seconds, each pass also reaping
orphans (reaper.py). What counts, read from each sandbox's state file:

* idle: now minus ``last_activity`` (the proxy kernel records each execution; REST actions,
  commands, file operations and a terminal's input and output count too, and a sandbox with a
  command or file operation of this server still running is never idle: sandbox/lifecycle/usage.py).
  Applies to sandboxes no kernel is attached to: named contexts whose kernel has shut down,
  sandboxes made through the REST API. A named context lives until then.
* attached: a kernel process holds the sandbox's context lock (contexts.py). Attached sandboxes
  are left to Jupyter's own kernel culling unless ``cull_attached`` is set.
* busy: a cell is running (the proxy writes ``busy``). Nothing is culled while a cell runs,
  not even past its TTL; it goes at the first pass after the cell ends.
* deadline: when a sandbox goes for its age, whatever its activity: its own timeout
  (``expires``, set by ``POST /api/sandboxes`` or ``PUT .../timeout``, as E2B's and
  OpenSandbox's sandboxes have one) or ``ttl`` after its creation, whichever comes first. The
  culler wakes for the soonest deadline rather than the next ``interval``, so a sandbox goes
  within a second of its timeout.
* paused at its timeout: a sandbox whose ``timeout_action`` is ``"pause"`` (E2B's
  ``autoPause``, e2b_api/control_plane.py) is paused at its timeout instead, and its timeout
  cleared (``paused_at_timeout`` records when); paused so, it is not idle, and stays until
  ``ttl`` or until it is removed. Resuming it (E2B's connect, or its next data-plane request)
  gives it a timeout again.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from traitlets import Bool, Float
from traitlets.config import LoggingConfigurable

from jupyter_sandbox.protocol.errors import InvalidRequestError, SandboxError
from jupyter_sandbox.sandbox.host import clock
from jupyter_sandbox.sandbox.host.state_record import SandboxState
from jupyter_sandbox.sandbox.lifecycle.contexts import kernel_attached
from jupyter_sandbox.sandbox.lifecycle.periodic import repeat
from jupyter_sandbox.sandbox.lifecycle.quotas import counts_toward_quota
from jupyter_sandbox.sandbox.lifecycle.reaper import reap_orphans, remove_each
from jupyter_sandbox.sandbox.manager import SandboxManager

log = logging.getLogger(__name__)

# Seconds past a deadline at which the culler wakes: the loop's timers may fire a little early.
DEADLINE_MARGIN = 0.1


class SandboxCuller(LoggingConfigurable):
    """Removes idle and expired sandboxes of every owner in this server's state directory."""

    idle_timeout = Float(
        3600.0,
        config=True,
        help="""Seconds without activity (a cell run, a command, a file read or written, a
        terminal's input or output, a REST action) after which a sandbox no kernel is attached
        to (a named context whose kernel shut down, a sandbox made through the REST API) is
        removed. 0 means never.""",
    )
    ttl = Float(
        86400.0,
        config=True,
        help="""Most seconds a sandbox may live, attached or not. 0 means no limit. A sandbox
        whose cell is running is removed at the first pass after the cell ends.""",
    )
    cull_attached = Bool(
        False,
        config=True,
        help="""Also remove sandboxes whose kernel is still attached once idle_timeout passes
        (the kernel then reports its sandbox gone). Usually Jupyter's own
        MappingKernelManager.cull_idle_timeout ends idle kernels, and their sandboxes with them.""",
    )
    interval = Float(
        60.0,
        config=True,
        help="Seconds between two culling passes; each also reaps orphaned sandboxes.",
    )

    orphan_grace = Float(
        60.0,
        config=True,
        help="""Seconds a sandbox whose kernel process vanished (killed without a shutdown)
        is kept before it is reaped: a restarting kernel reattaches well within this.""",
    )

    def __init__(self, manager: SandboxManager, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.manager = manager
        self._next_deadline: datetime.datetime | None = None  # the soonest one still ahead
        self._announced: datetime.datetime | None = None  # the soonest set during this pass
        self._wake = asyncio.Event()

    async def run(self) -> None:
        """Cull and reap until cancelled (the extension cancels it when the server stops)."""
        await repeat(self.cull_once, self._seconds_to_next_pass, "culling pass", log, self._wake)

    async def cull_once(self) -> list[str]:
        """One pass: reap orphans, then remove what is idle or expired. Returns the ids culled.

        A sandbox that cannot be removed now is logged and left for the next pass; the others
        go all the same (reaper.remove_each)."""
        self._announced = None
        await reap_orphans(self.manager, grace=self.orphan_grace)
        due: dict[str, Callable[[], Awaitable[None]]] = {}
        now = clock.now()
        soonest: datetime.datetime | None = None
        listed = await self.manager.backend.list_sandboxes()
        # Those another process removed (a kernel its ephemeral sandbox, another server, the
        # CLI) are not known here otherwise; this process's own removals forget at once.
        self.manager.usage.forget_all_but([info.sandbox_id for info in listed])
        for info in listed:
            if not self.manager.holds(info):
                continue
            state = self.manager.read_state(info.sandbox_id)
            if self.pause_due(state, now):
                await self._pause_at_timeout(info.owner, info.sandbox_id, info.status, now)
                continue
            reason = self.reason_to_cull(
                state, now, in_use=self.manager.usage.in_use(info.sandbox_id)
            )
            if reason is None:
                deadline = self.deadline(state) if counts_toward_quota(state) else None
                if deadline is not None and deadline > now:
                    soonest = _sooner(soonest, deadline)
                continue
            log.info("culling sandbox %s of %s: %s", info.sandbox_id, info.owner, reason)
            due[info.sandbox_id] = functools.partial(
                self.manager.remove, info.owner, info.sandbox_id
            )
        culled = await remove_each(due, "culling pass")
        # A deadline set while this pass ran may be missing from the states it read.
        self._next_deadline = _sooner(soonest, self._announced)
        return culled

    def reason_to_cull(
        self, state: SandboxState, now: datetime.datetime, *, in_use: bool = False
    ) -> str | None:
        """Why the sandbox with ``state`` should go now, or None to keep it; ``in_use``: a
        command or file operation of this server runs in it (never idle, sandbox/lifecycle/usage.py)."""
        if not state or not counts_toward_quota(state):
            return None  # being created, or an unclaimed pool member (the pool manages those)
        attached = kernel_attached(self.manager.settings.state_path, state)
        if attached and state.get("busy"):
            return None
        expires = clock.parse_iso(state.get("expires"))
        if expires is not None and now >= expires and state.get("timeout_action") != "pause":
            return f"past its timeout (it expired at {expires.isoformat(timespec='seconds')})"
        if self.ttl and _seconds_since(_life_began(state), now) >= self.ttl:
            return f"older than its time to live ({self.ttl:g} s)"
        # Stopped by a memory snapshot, or paused at its timeout to be resumed later, it holds
        # no CPU and waits for its owner: only its time to live counts.
        if state.get("checkpointed") or state.get("paused_at_timeout"):
            return None
        idle = _seconds_since(state.get("last_activity") or state.get("created"), now)
        if in_use or not self.idle_timeout or idle < self.idle_timeout:
            return None
        if self.cull_attached or not attached:
            return f"idle for {idle:.0f} s (idle timeout {self.idle_timeout:g} s)"
        return None

    def pause_due(self, state: SandboxState, now: datetime.datetime) -> bool:
        """Whether the sandbox with ``state`` is past its timeout and is to be paused then
        rather than removed (``timeout_action`` "pause"); kept, as removal is, while a kernel
        attached to it runs a cell."""
        if state.get("timeout_action") != "pause" or not counts_toward_quota(state):
            return False
        expires = clock.parse_iso(state.get("expires"))
        if expires is None or now < expires:
            return False
        attached = kernel_attached(self.manager.settings.state_path, state)
        return not (attached and state.get("busy"))

    async def _pause_at_timeout(
        self, owner: str, sandbox_id: str, status: str, now: datetime.datetime
    ) -> None:
        if status == "running":
            log.info("pausing sandbox %s of %s: past its timeout", sandbox_id, owner)
            try:
                await self.manager.pause(owner, sandbox_id)
            except SandboxError as exc:  # removed or paused meanwhile: the next pass looks again
                log.warning("could not pause sandbox %s at its timeout: %s", sandbox_id, exc)
                return
        self.manager.update_state(sandbox_id, expires=None, paused_at_timeout=now.isoformat())

    # -- deadlines ----------------------------------------------------------------------------

    def deadline(self, state: SandboxState) -> datetime.datetime | None:
        """When the sandbox goes for its age (its timeout or ``ttl``, the sooner); None: never."""
        deadlines = [self._ttl_deadline(state), clock.parse_iso(state.get("expires"))]
        return min((d for d in deadlines if d is not None), default=None)

    def expiry(self, state: SandboxState, timeout: float) -> datetime.datetime:
        """The deadline ``timeout`` seconds from now for a sandbox with ``state`` (``{}`` for one
        about to be made); InvalidRequestError if ``ttl`` ends the sandbox's life before it."""
        now = clock.now()
        expires = now + datetime.timedelta(seconds=timeout)
        limit = self._ttl_deadline(state) or (now + datetime.timedelta(seconds=self.ttl))
        if self.ttl and expires > limit + datetime.timedelta(seconds=1):
            left = max((limit - now).total_seconds(), 0.0)
            raise InvalidRequestError(
                f"timeout {timeout:g} s would outlast the server's time to live for sandboxes "
                f"(SandboxCuller.ttl, {self.ttl:g} s from creation): at most {left:.0f} s are "
                "left for this one; ask for less, or raise SandboxCuller.ttl"
            )
        return expires

    def deadline_changed(self, deadline: datetime.datetime) -> None:
        """A sandbox's deadline was set (a timeout given or extended): make sure a pass comes
        by then, however long ``interval`` is."""
        self._announced = _sooner(self._announced, deadline)
        if self._next_deadline is None or deadline < self._next_deadline:
            self._next_deadline = deadline
            self._wake.set()  # the sleeping loop sleeps anew, until this deadline

    def _ttl_deadline(self, state: SandboxState) -> datetime.datetime | None:
        began = clock.parse_iso(_life_began(state))
        if not self.ttl or began is None:
            return None
        return began + datetime.timedelta(seconds=self.ttl)

    def _seconds_to_next_pass(self) -> float:
        if self._next_deadline is None:
            return self.interval
        until = (self._next_deadline - clock.now()).total_seconds() + DEADLINE_MARGIN
        return max(min(self.interval, until), DEADLINE_MARGIN)


def _sooner(
    one: datetime.datetime | None, other: datetime.datetime | None
) -> datetime.datetime | None:
    return min((d for d in (one, other) if d is not None), default=None)


def _life_began(state: SandboxState) -> Any:
    # A warm-pool member's life as the user's sandbox begins when it is claimed.
    return state.get("claimed") or state.get("created")


def _seconds_since(stamp: Any, now: datetime.datetime) -> float:
    then = clock.parse_iso(stamp)
    return 0.0 if then is None else (now - then).total_seconds()  # unreadable: never culls
