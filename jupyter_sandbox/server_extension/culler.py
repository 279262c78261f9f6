"""Culling: sandboxes idle too long or past their time to live are removed.

Runs inside the server extension, one pass every ``interval`` seconds, each pass also reaping
orphans (reaper.py). What counts, read from each sandbox's state file:

* idle: now minus ``last_activity`` (the proxy kernel records each execution; REST actions
  count too). Applies to sandboxes no kernel is attached to: named contexts whose kernel has
  shut down, sandboxes made through the REST API. A named context lives until then.
* attached: a kernel process holds the sandbox's context lock (contexts.py). Attached sandboxes
  are left to Jupyter's own kernel culling unless ``cull_attached`` is set.
* busy: a cell is running (the proxy writes ``busy``). Nothing is culled while a cell runs,
  not even past its TTL; it goes at the first pass after the cell ends.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

from traitlets import Bool, Float
from traitlets.config import LoggingConfigurable

from ..sandbox import SandboxManager
from ..sandbox.contexts import kernel_attached
from ..sandbox.periodic import repeat
from ..sandbox.quotas import counts_toward_quota
from ..sandbox.reaper import reap_orphans

log = logging.getLogger(__name__)


class SandboxCuller(LoggingConfigurable):
    """Removes idle and expired sandboxes of every owner in this server's state directory."""

    idle_timeout = Float(
        3600.0,
        config=True,
        help="""Seconds without an execution after which a sandbox no kernel is attached to
        (a named context whose kernel shut down, a sandbox made through the REST API) is removed.
        0 means never.""",
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

    async def run(self) -> None:
        """Cull and reap until cancelled (the extension cancels it when the server stops)."""
        await repeat(self.cull_once, lambda: self.interval, "culling pass", log)

    async def cull_once(self) -> list[str]:
        """One pass: reap orphans, then remove what is idle or expired. Returns the ids culled."""
        await reap_orphans(self.manager, grace=self.orphan_grace)
        culled = []
        now = datetime.datetime.now(datetime.timezone.utc)
        for info in await self.manager.backend.list_sandboxes():
            if not self.manager.holds(info):
                continue
            state = self.manager.read_state(info.sandbox_id)
            reason = self.reason_to_cull(state, now)
            if reason is None:
                continue
            log.info("culling sandbox %s of %s: %s", info.sandbox_id, info.owner, reason)
            await self.manager.remove(info.owner, info.sandbox_id)
            culled.append(info.sandbox_id)
        return culled

    def reason_to_cull(self, state: dict[str, Any], now: datetime.datetime) -> str | None:
        """Why the sandbox with ``state`` should go now, or None to keep it."""
        if not state or not counts_toward_quota(state):
            return None  # being created, or an unclaimed pool member (the pool manages those)
        attached = kernel_attached(self.manager.settings.state_path, state)
        if attached and state.get("busy"):
            return None
        # A warm-pool member's life as the user's sandbox begins when it is claimed.
        age = _seconds_since(state.get("claimed") or state.get("created"), now)
        idle = _seconds_since(state.get("last_activity") or state.get("created"), now)
        if self.ttl and age >= self.ttl:
            return f"older than its time to live ({self.ttl:g} s)"
        # Stopped by a memory snapshot, it holds no memory or CPU: only its time to live counts.
        if state.get("checkpointed"):
            return None
        if self.idle_timeout and idle >= self.idle_timeout and (self.cull_attached or not attached):
            return f"idle for {idle:.0f} s (idle timeout {self.idle_timeout:g} s)"
        return None


def _seconds_since(stamp: Any, now: datetime.datetime) -> float:
    try:
        then = datetime.datetime.fromisoformat(str(stamp))
    except ValueError:
        return 0.0  # an unreadable time never culls
    if then.tzinfo is None:
        then = then.replace(tzinfo=datetime.timezone.utc)
    return (now - then).total_seconds()
