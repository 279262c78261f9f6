"""Slots of something the server shares between its users, given out fairly between owners.

A server that serves several users has resources all of them draw on: the engine's worker
threads above all (engine.py), but also its default thread pool, which archive scans use. A
plain bounded pool is first come, first served: one owner who starts many streamed commands
takes every engine thread, and another owner's list of sandboxes then waits for one until a
command ends (benchmarks/fairness.py). :class:`FairShare` stands in front of such a pool: no owner
holds more than ``per_owner`` of its ``total`` slots, and when slots are short the next free one
goes to the waiting owner who holds the fewest (the longest waiting among equals), so an owner who
asks little is served at once however much another asks.

Which owner asks is :data:`current_owner`, a context variable: the REST handlers set it for
their request (server_extension/base.py), and every task started while serving it
inherits it, so calls deep in the core need no owner argument of their own. Work done for no
request (the culler, the pool, a proxy kernel's own process) counts as the owner "".
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from contextvars import ContextVar

# The owner on whose behalf the current task works; "" for the server's (or a kernel's) own.
current_owner: ContextVar[str] = ContextVar("jupyter_sandbox_owner", default="")
# The shares a slot of which the current task holds through FairShare.slot (and the tasks it
# started while holding it, which work for it): a nested slot of the same share is not taken.
_holding: ContextVar[frozenset[FairShare]] = ContextVar(
    "jupyter_sandbox_shares_held", default=frozenset()
)


class Holdings:
    """How many of something each owner holds now, and all owners together."""

    def __init__(self) -> None:
        self.held: dict[str, int] = {}  # owner -> how many held now (owners holding none: absent)
        self.in_use = 0

    def take(self, owner: str) -> None:
        self.held[owner] = self.held.get(owner, 0) + 1
        self.in_use += 1

    def give_back(self, owner: str) -> None:
        held = self.held[owner] - 1
        if held:
            self.held[owner] = held
        else:
            del self.held[owner]
        self.in_use -= 1


class FairShare(Holdings):
    """``total`` slots, at most ``per_owner`` of them held by one owner at once; an owner
    waits for a slot (``async with share.slot(): ...``) rather than being refused."""

    def __init__(self, total: int, per_owner: int) -> None:
        if total < 1 or per_owner < 1:
            raise ValueError(f"a fair share needs slots: total={total}, per_owner={per_owner}")
        super().__init__()
        self.total = total
        self.per_owner = min(per_owner, total)
        # owner -> its waiters in the order they came: (arrival number, future set on grant)
        self._waiting: dict[str, deque[tuple[int, asyncio.Future[None]]]] = {}
        self._arrivals = itertools.count()

    def _can_take(self, owner: str) -> bool:
        return self.in_use < self.total and self.held.get(owner, 0) < self.per_owner

    async def acquire(self, owner: str | None = None) -> str:
        """Wait for a slot for ``owner`` (by default :data:`current_owner`); return the owner
        to pass to :meth:`release`. A cancelled wait holds nothing."""
        owner = current_owner.get() if owner is None else owner
        # Waiters of this owner come first: a newcomer must not overtake them.
        if self._can_take(owner) and not self._waiting.get(owner):
            self.take(owner)
            return owner
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._waiting.setdefault(owner, deque())
        entry = (next(self._arrivals), granted)
        queue.append(entry)
        try:
            await granted
        except BaseException:
            if granted.done() and not granted.cancelled():
                self.release(owner)  # granted just as the wait was given up: hand it on
            else:
                self._forget(owner, entry)
            raise
        return owner

    def _forget(self, owner: str, entry: tuple[int, asyncio.Future[None]]) -> None:
        """A wait given up: out of the queue, unless :meth:`_grant` has passed it over already."""
        queue = self._waiting.get(owner)
        if queue is not None and entry in queue:
            queue.remove(entry)
            if not queue:
                del self._waiting[owner]

    def release(self, owner: str) -> None:
        """Give back a slot ``owner`` held, and hand free slots to those waiting."""
        self.give_back(owner)
        self._grant()

    def _grant(self) -> None:
        while self.in_use < self.total:
            eligible = [owner for owner in self._waiting if self._can_take(owner)]
            if not eligible:
                return
            # The owner holding fewest slots; among equals, whose waiter came first.
            owner = min(eligible, key=lambda o: (self.held.get(o, 0), self._waiting[o][0][0]))
            queue = self._waiting[owner]
            _, granted = queue.popleft()
            if not queue:
                del self._waiting[owner]
            # Cancelled, and its task has not yet run to leave the queue: a cancellation that
            # lands in the same turn as a release (a client leaving while its call waits). It
            # is passed over; granting it would count a slot nobody holds, and would raise
            # here, leaving every later waiter unserved with the slots free.
            if granted.done():
                continue
            self.take(owner)
            granted.set_result(None)

    @contextlib.asynccontextmanager
    async def slot(self, owner: str | None = None) -> AsyncIterator[str]:
        """Hold a slot for ``owner`` (by default :data:`current_owner`) while in the block.

        Re-entrant: inside a block that holds a slot of this share already (a request's turn
        around a core call that takes its own, as snapshot restores do), no second is taken.
        A second would wait on the owner's own share, which as many such requests as an owner
        may hold slots would fill with their first, each then waiting for ever."""
        if self in _holding.get():
            yield current_owner.get() if owner is None else owner
            return
        taken = await self.acquire(owner)
        held = _holding.set(_holding.get() | {self})
        try:
            yield taken
        finally:
            _holding.reset(held)
            self.release(taken)

    def waiting(self) -> int:
        """How many waits for a slot there are now (for tests and logs)."""
        return sum(len(queue) for queue in self._waiting.values())


class OwnerCap(Holdings):
    """A count of things that last (directory watches, event streams), capped per owner and for
    the server: unlike :class:`FairShare` it refuses at once rather than wait, for things that
    may last for hours. ``what`` names them and the settings that cap them, for the message.

    ``per_owner`` and ``total`` are read on each :meth:`take` (0: no cap), so callers may pass
    a callable reading their configuration, changed at run time.
    """

    def __init__(self, what: str, per_owner_setting: str, total_setting: str) -> None:
        super().__init__()
        self.what = what
        self.per_owner_setting = per_owner_setting
        self.total_setting = total_setting

    def refusal(self, owner: str, per_owner: int, total: int) -> str | None:
        """Why ``owner`` may not have one more now, or None if it may."""
        mine = self.held.get(owner, 0)
        if per_owner and mine >= per_owner:
            return (
                f"you already have {mine} {self.what} open, the most one user may "
                f"({self.per_owner_setting}): close one first"
            )
        if total and self.in_use >= total:
            return (
                f"this server already has {self.in_use} {self.what} open for all its users, the "
                f"most it may ({self.total_setting}): close one of yours, or try again later"
            )
        return None

    @contextlib.contextmanager
    def holding(
        self, owner: str, per_owner: int, total: int, refused: Callable[[str], Exception]
    ) -> Iterator[None]:
        """Hold one for ``owner`` while in the block; ``refused(why)`` raised at once, holding
        nothing, when a cap (:meth:`refusal`) allows no more."""
        why = self.refusal(owner, per_owner, total)
        if why is not None:
            raise refused(why)
        self.take(owner)
        try:
            yield
        finally:
            self.give_back(owner)
