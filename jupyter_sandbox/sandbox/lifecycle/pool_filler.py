"""Filling and draining the warm pool: one long-lived process per owner and state directory.

The pool's keys, layout and claims are in pool.py; everything here is the refiller's side: which
keys to keep warm (the default request and those that missed recently), starting members for
them, backing off after failures, and removing the members of keys no longer kept. The server
extension runs one :class:`WarmPool` per owner; a lock in the state directory makes sure only
one process refills, however many servers share it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from traitlets import Float, Integer
from traitlets.config import LoggingConfigurable

from jupyter_sandbox.protocol.errors import SandboxError
from jupyter_sandbox.sandbox.host.process_lock import ProcessLock
from jupyter_sandbox.sandbox.host.sandbox_dir import sandbox_directories
from jupyter_sandbox.sandbox.lifecycle.periodic import repeat
from jupyter_sandbox.sandbox.lifecycle.pool import pool_key, take, unclaimed_member
from jupyter_sandbox.sandbox.lifecycle.pool_directory import MAX_WANTED, PoolDirectory

if TYPE_CHECKING:
    from jupyter_sandbox.sandbox.manager import SandboxManager, SandboxRequest

log = logging.getLogger(__name__)


@dataclass
class _Backoff:
    failures: int = 0
    retry_at: float = 0.0


class WarmPool(LoggingConfigurable):
    """Keeps sandboxes of ``owner`` warm, for the default request and recently missed ones.

    Run by a long-lived process (the server extension): :meth:`start` on start-up, :meth:`drain`
    on shutdown. Only one process per owner and state directory refills (a lock decides); the
    claims themselves need no pool object (SandboxManager.create tries the pool first).
    """

    size = Integer(
        1,
        min=0,
        config=True,
        help="""Unclaimed sandboxes kept ready per pool key (runtime, image, limits, launch
        directory...). Each idle member holds host memory (docs/explanation/performance.md,
        "What an idle sandbox costs"). 0 turns the pool off: every kernel
        start makes a new sandbox.""",
    )
    max_keys = Integer(
        4,
        min=0,
        max=MAX_WANTED,
        config=True,
        help=f"""Pool keys kept warm besides the default one: those of the kernel starts that
        missed most recently (a notebook in another directory, another runtime...). The least
        recently wanted key beyond this is dropped and its members removed. 0: only the default
        key (the server's root directory, default runtime and limits). At most {MAX_WANTED}.""",
    )
    refill_interval = Float(
        2.0,
        min=0.1,
        config=True,
        help="""Seconds between two checks of the pool; claimed or dead members are replaced at
        the next check. A member takes as long to start as a kernel's cold start
        (docs/explanation/performance.md, "Kernel start, cold").""",
    )
    max_retry_interval = Float(
        300.0,
        min=1.0,
        config=True,
        help="""Seconds at most between two attempts to start a member for a key whose last
        start failed (the wait doubles from refill_interval after each failure).""",
    )

    def __init__(
        self,
        manager: SandboxManager,
        owner: str,
        *,
        launch_dir: str | None = None,
        workspace_root: str | None = None,
        purpose: str = "warm-pool",
        keep_default: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.manager = manager
        self.owner = owner
        self.launch_dir = launch_dir
        # The root its members' /workspace must stay in (a gateway's user root): part of
        # every request it keeps, as of the kernels that would claim them.
        self.workspace_root = workspace_root
        # False: only the keys kernels missed (pool_keeper.py: no server, so no default request)
        self.keep_default = keep_default
        self.purpose = purpose
        self.directory = PoolDirectory(manager.settings.state_path)
        self._refill_lock = ProcessLock(self.directory.refill_lock_path(owner))
        self._task: asyncio.Task[None] | None = None
        self._backoff: dict[str, _Backoff] = {}

    # -- life --------------------------------------------------------------------------------

    async def start(self) -> bool:
        """Start refilling in the background; False (and nothing started) when another process
        already keeps this owner's pool warm, or size is 0."""
        if self._task is not None:
            return True
        if self.size == 0 or not self._take_refill_lock():
            return False
        self._task = asyncio.ensure_future(self._run())
        return True

    async def drain(self) -> list[str]:
        """Stop refilling and remove every unclaimed member of this owner (returns their ids).

        Members a kernel has taken are left to it. Does nothing while another process refills.
        """
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if not self.directory.root.is_dir():
            # No member was ever made here, or the state directory is gone: nothing to remove,
            # and taking the lock would create the directories again.
            self._refill_lock.release()
            return []
        if not self._take_refill_lock():
            return []
        try:
            return await self._remove_members(lambda key: True)
        finally:
            self._refill_lock.release()

    async def _run(self) -> None:
        await repeat(self.refill, lambda: self.refill_interval, "warm pool refill", log)

    # -- one refill pass ----------------------------------------------------------------------

    async def refill(self) -> list[str]:
        """Bring every kept key to ``size`` members; return the ids of the members started.

        Members that died are removed first, and the members of keys no longer kept. The first
        refill takes this owner's refill lock (held until :meth:`drain`); while another process
        holds it, nothing is done.
        """
        if not self._take_refill_lock():
            return []
        requests = self._kept_requests()
        await self._remove_members(lambda key: key not in requests, dead_only=False)
        await self._remove_members(lambda key: True, dead_only=True)
        started = []
        for key, request in requests.items():
            backoff = self._backoff.get(key)
            if backoff is not None and time.monotonic() < backoff.retry_at:
                continue
            while len(self.directory.tickets(key)) < self.size:
                try:
                    sandbox = await self.manager.start_sandbox(
                        request, purpose=self.purpose, pool_key=key
                    )
                except SandboxError as exc:
                    self._failed(key, exc)
                    break
                self.directory.add_ticket(key, sandbox.sandbox_id)
                self._backoff.pop(key, None)
                started.append(sandbox.sandbox_id)
        return started

    def _take_refill_lock(self) -> bool:
        """Become the one process keeping this owner's pool warm (held until drain)."""
        if self._refill_lock.try_acquire(note=str(os.getpid())):
            return True
        log.info("warm pool of %s: another process keeps it warm", self.owner)
        return False

    def members(self) -> dict[str, list[str]]:
        """Unclaimed members (sandbox ids) per key, for status displays."""
        return {key: self.directory.tickets(key) for key in self.directory.pool_keys()}

    def _kept_requests(self) -> dict[str, SandboxRequest]:
        """The default request and up to max_keys recently wanted ones, by pool key."""
        settings, backend = self.manager.settings, self.manager.backend_key()
        kept: dict[str, SandboxRequest] = {}
        if self.keep_default:
            default = self.manager.check_request(
                self.owner, launch_dir=self.launch_dir, workspace_root=self.workspace_root
            )
            kept[pool_key(settings, default, backend)] = default
        adaptive = 0
        for name, record in self.directory.wanted():
            request = self._request_of(record) if record.get("owner") == self.owner else None
            if request is None:
                continue
            key = pool_key(settings, request, backend)
            if key in kept:
                continue
            if adaptive >= self.max_keys:
                self.directory.forget_wanted(name)
                continue
            kept[key] = request
            adaptive += 1
        return kept

    def _request_of(self, record: dict[str, Any]) -> SandboxRequest | None:
        try:
            return self.manager.check_request(
                self.owner,
                runtime=record.get("runtime"),
                image=record.get("image"),
                limits=record.get("limits"),
                launch_dir=record.get("launch_dir"),
                workspace_root=self.workspace_root,
            )
        except (SandboxError, TypeError, ValueError) as exc:
            log.warning("warm pool: ignoring a wanted key: %s", exc)
            return None

    def _failed(self, key: str, exc: SandboxError) -> None:
        backoff = self._backoff.setdefault(key, _Backoff())
        backoff.failures += 1
        wait = min(self.max_retry_interval, self.refill_interval * 2**backoff.failures)
        backoff.retry_at = time.monotonic() + wait
        log.warning(
            "warm pool: a member for key %s did not start (%s); next try in %.0f s",
            key,
            exc.message,
            wait,
        )

    async def _remove_members(self, drop: Any, *, dead_only: bool = False) -> list[str]:
        """Take and remove this owner's unclaimed members of the keys ``drop`` says, or only the
        dead ones among them; also members that lost their ticket (a start this process
        abandoned). Taken members are skipped."""
        state_dir = self.manager.settings.state_path
        running: set[str] | None = None
        if dead_only:
            running = {
                info.sandbox_id
                for info in await self.manager.list_sandboxes(self.owner)
                if info.running
            }
        removed = []
        for directory in sandbox_directories(state_dir):
            state = directory.read_state()
            key = state.get("pool")
            if state.get("owner") != self.owner or not unclaimed_member(state):
                continue
            if not isinstance(key, str) or not drop(key):
                continue
            has_ticket = self.directory.has_ticket(key, directory.sandbox_id)
            if dead_only and (directory.sandbox_id in (running or set()) or not has_ticket):
                continue
            if not take(directory, "pool"):
                continue
            self.directory.remove_ticket(key, directory.sandbox_id)
            await self.manager.remove(self.owner, directory.sandbox_id)
            directory.remove()
            removed.append(directory.sandbox_id)
        if removed:
            log.info("warm pool: removed %d member(s): %s", len(removed), ", ".join(removed))
        return removed
