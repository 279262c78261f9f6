"""Warm pools per hub user: the gateway keeps sandboxes started ahead for each active user.

A pool member is made for one owner: its owner label, its mounts and its limits are fixed when
its container is created (the engine can change none of them later), so a member cannot be made
for nobody and given to a user at the claim. Each hub user gets a pool of their own instead
(sandbox/lifecycle/pool_filler.py's ``WarmPool``, one per owner, each with its own refill lock
and pool keys, which hash the owner): a member is only ever claimed by its owner's kernels, so
one user's claims never take another's member, and every user keeps ``UserPools.size`` of them
whatever the others do. A member holds nothing of its owner's until a kernel claims it but the
copy-on-write view of the owner's root (``SandboxGateway.user_root``) that any kernel of theirs
would get, and no environment of theirs: the default request has none. Unclaimed members count
toward no quota (quotas.py); a claimed one counts toward its owner's.

A user's pool starts with their first kernel start and is drained (its unclaimed members
removed) ``UserPools.idle_timeout`` seconds after their last one, and when the gateway stops,
so a hub of many users keeps members only for those who use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traitlets import Float, Integer
from traitlets.config import LoggingConfigurable

from jupyter_sandbox.sandbox.host.fair_share import current_owner
from jupyter_sandbox.sandbox.lifecycle.periodic import repeat
from jupyter_sandbox.sandbox.lifecycle.pool_filler import WarmPool

if TYPE_CHECKING:
    from jupyter_sandbox.sandbox.manager import SandboxManager

log = logging.getLogger(__name__)

IDLE_CHECK_SECONDS = 10.0  # how often idle users' pools are looked for


@contextlib.contextmanager
def acting_for(owner: str) -> Iterator[None]:
    """Work (and the tasks it starts) done meanwhile counts as ``owner``'s."""
    token = current_owner.set(owner)
    try:
        yield
    finally:
        current_owner.reset(token)


class UserPools(LoggingConfigurable):
    """One warm pool per active hub user, kept by the gateway's process."""

    size = Integer(
        1,
        min=0,
        config=True,
        help="""Unclaimed sandboxes the gateway keeps ready per active hub user, for that
        user's default kernel (their root as /workspace, the default runtime, image and
        limits) and for up to WarmPool.max_keys requests of theirs that missed. Each idle
        member holds host memory (docs/explanation/performance.md). 0: no pools.""",
    )
    idle_timeout = Float(
        600.0,
        min=1.0,
        config=True,
        help="""Seconds after a hub user's last kernel start at which the gateway removes
        their pool's unclaimed sandboxes and stops refilling it (their next kernel start
        starts it again).""",
    )

    def __init__(self, manager: SandboxManager, purpose: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.manager = manager
        self.purpose = purpose
        self._pools: dict[str, WarmPool] = {}
        self._last_start: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

    async def keep_warm(self, owner: str, user_root: Path) -> None:
        """Note a kernel start of ``owner``'s and keep their pool (rooted at ``user_root``)
        warm from now on."""
        self._last_start[owner] = time.monotonic()
        if self.size == 0 or owner in self._pools:
            return
        pool = WarmPool(
            self.manager,
            owner,
            launch_dir=str(user_root),
            workspace_root=str(user_root),
            purpose=self.purpose,
            parent=self,
            size=self.size,
        )
        # Its refills (tasks started here inherit the context) are this user's work, in their
        # share of the engine (host/fair_share.py), not the gateway's own, which every user's
        # pool and the culler would otherwise wait for in one line.
        with acting_for(owner):
            started = await pool.start()
        if not started:
            return  # another process keeps this owner's pool: the next start asks again
        self._pools[owner] = pool
        log.info("warm pool of %s: kept (%d per request)", owner, self.size)
        if self._task is None:
            with acting_for(""):  # the gateway's own, whoever's start began it
                self._task = asyncio.ensure_future(
                    repeat(self.drain_idle, lambda: IDLE_CHECK_SECONDS, "idle users' pools", log)
                )

    def owners(self) -> list[str]:
        """The users whose pools are kept now."""
        return sorted(self._pools)

    async def drain_idle(self) -> list[str]:
        """Drain the pools of users with no kernel start for idle_timeout; their names."""
        now = time.monotonic()
        idle = [o for o in self._pools if now - self._last_start[o] >= self.idle_timeout]
        for owner in idle:
            with acting_for(owner):
                removed = await self._pools.pop(owner).drain()
            log.info("warm pool of %s: idle, %d sandbox(es) removed", owner, len(removed))
        return idle

    async def drain(self) -> None:
        """Stop keeping every pool and remove their unclaimed members (the gateway stops)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        while self._pools:
            owner, pool = self._pools.popitem()
            with acting_for(owner):
                removed = await pool.drain()
            log.info("warm pool of %s: drained, %d sandbox(es) removed", owner, len(removed))
