"""Ready clients of sandboxes' kernels, kept between code runs (code_runs.run_code).

Making a client (kernel_link.open_ready_client: pin the kernel's socket files, a ZMQ context,
three sockets, a kernel_info round trip, the wait for iopub to join) costs several times what
the run of ``pass`` itself does. So a client whose run ended cleanly is kept, idle, for the next
run of the same sandbox: :class:`KernelClients`, one per SandboxManager
(``SandboxManager.kernel_clients``). The rules, and why:

- A run holds its client alone (:meth:`KernelClients.client`), so two runs never read one
  iopub stream; each run still counts only the messages of its own request (kernel_execution).
- Only a clean end gives the client back: a run that timed out, was interrupted, cancelled or
  raised may have replies still on the way to its sockets, so its client is closed.
- A kept client is taken again only for the kernel it was made for: the same generation of the
  sandbox's interpreter (a restart in place, POST /restart or a notebook's, binds new socket
  files), the same connection info, socket files still the very ones pinned (checked with
  lstat: a restored sandbox or a replaced socket is never talked to through an old pin), and
  the same event loop. Anything else is closed. What queued on it while it was idle (a notebook
  on the same kernel publishes on iopub) is drained, without waiting, before the run.
- At most ``max_idle`` kept per sandbox, each for ``idle_timeout`` seconds, so pinned
  descriptors, sockets and ZMQ I/O threads do not pile up across many sandboxes. The manager
  lets a sandbox's go when it pauses or removes it (:meth:`KernelClients.discard`), and all of
  them when it closes (:meth:`KernelClients.close`); a sandbox stopped otherwise has its
  clients closed at the next run's check or at their idle timeout.

A kept client whose kernel goes away later is found as a new client's would be: the run's
watch (kernel_execution.execute's ``still_running``) says why, and the run fails with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import zmq
from traitlets import Float, Int
from traitlets.config import LoggingConfigurable

from jupyter_sandbox.sandbox.kernel_link.link import HeldClient, open_ready_client
from jupyter_sandbox.sandbox.kernel_link.socket_pin import PinnedKernelClient

log = logging.getLogger(__name__)

MAX_DRAINED = 10_000  # messages read off an idle client at most; later ones the run skips


@dataclass
class Lease:
    """A client lent to one run. The run sets ``clean`` once it ended cleanly (a reply and the
    idle status came, no interrupt was sent): only then is the client given back."""

    client: PinnedKernelClient
    reused: bool
    clean: bool = False
    after: Coroutine[Any, Any, None] | None = None  # what still has to use the client

    def hand_over(self, work: Coroutine[Any, Any, None]) -> None:
        """The run went away with ``work`` left to do on the client (its queued request to
        stop once it starts: kernel_execution.execute): it runs on after the run, and the
        client is closed once it is done."""
        self.after = work


@dataclass
class ClientCounts:
    """What the pool did since it was made: clients made, taken again, and closed."""

    made: int = 0
    reused: int = 0
    closed: int = 0


@dataclass
class _Idle:
    held: HeldClient
    generation: int
    loop: asyncio.AbstractEventLoop
    since: float
    timer: asyncio.TimerHandle | None = None


class KernelClients(LoggingConfigurable):
    """The idle ready clients of each sandbox's kernel, lent to code runs one at a time."""

    max_idle = Int(
        2,
        help="Idle clients of a sandbox's kernel kept for its next code runs (each holds a ZMQ "
        "context with its I/O thread, three sockets and five pinned descriptors); 0 makes a "
        "client for every run.",
    ).tag(config=True)
    idle_timeout = Float(
        30.0,
        help="Seconds an idle client of a sandbox's kernel is kept for the next code run "
        "before it is closed.",
    ).tag(config=True)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._idle: dict[str, list[_Idle]] = {}
        self._closed = False
        self._finishing: set[asyncio.Task[None]] = set()  # runs' leftover work on clients
        self.counts = ClientCounts()

    def idle(self, sandbox_id: str) -> int:
        """How many clients of ``sandbox_id``'s kernel wait for a run now."""
        return len(self._idle.get(sandbox_id, []))

    @contextlib.asynccontextmanager
    async def client(
        self,
        sandbox_id: str,
        generation: int,
        connection_info: dict[str, Any],
        *,
        timeout: float,
        still_running: Callable[[], Awaitable[str | None]],
    ) -> AsyncIterator[Lease]:
        """A ready client of the kernel behind ``connection_info`` (generation ``generation`` of
        the sandbox's interpreter), the run's alone until it exits: a kept one if one fits,
        else a new one (within ``timeout`` seconds, ``still_running`` asked meanwhile, as
        kernel_link.ready_client). Kept again afterwards only if the run set ``clean``."""
        loop = asyncio.get_running_loop()
        held = await self._take(sandbox_id, generation, connection_info, loop)
        reused = held is not None
        if held is None:
            held, _ = await open_ready_client(
                connection_info, timeout=timeout, still_running=still_running
            )
            self.counts.made += 1
        lease = Lease(held.client, reused)
        try:
            yield lease
        except BaseException:
            self._close_after(held, lease.after)
            raise
        if lease.after is not None:
            self._close_after(held, lease.after)
        elif lease.clean:
            self._give_back(sandbox_id, generation, held, loop)
        else:
            self._close(held)

    def discard(self, sandbox_id: str) -> None:
        """Close ``sandbox_id``'s idle clients (it is paused, stopped or removed)."""
        for entry in self._idle.pop(sandbox_id, []):
            self._close_idle(entry)

    def close(self) -> None:
        """Close every idle client, and those runs left work on (that work is cancelled);
        clients of runs still going are closed as they end."""
        self._closed = True
        for sandbox_id in list(self._idle):
            self.discard(sandbox_id)
        for task in list(self._finishing):
            task.cancel()  # its client is closed as it ends

    async def _take(
        self,
        sandbox_id: str,
        generation: int,
        connection_info: dict[str, Any],
        loop: asyncio.AbstractEventLoop,
    ) -> HeldClient | None:
        """The newest idle client that still fits, drained; those that do not are closed."""
        entries = self._idle.get(sandbox_id, [])
        while entries:
            entry = entries.pop()
            if entry.timer is not None:
                entry.timer.cancel()
            fits = (
                entry.generation == generation
                and entry.loop is loop
                and entry.held.connection_info == connection_info
                and entry.held.still_bound()
            )
            if not fits:
                log.debug("closing a stale client of sandbox %s's kernel", sandbox_id)
                self._close(entry.held)
                continue
            if not entries:
                self._idle.pop(sandbox_id, None)
            try:
                await _drain(entry.held.client)
            except BaseException:
                self._close(entry.held)
                raise
            self.counts.reused += 1
            return entry.held
        self._idle.pop(sandbox_id, None)
        return None

    def _give_back(
        self,
        sandbox_id: str,
        generation: int,
        held: HeldClient,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        entries = self._idle.setdefault(sandbox_id, [])
        if self._closed or len(entries) >= self.max_idle:
            if not entries:
                self._idle.pop(sandbox_id, None)
            self._close(held)
            return
        entry = _Idle(held, generation, loop, time.monotonic())
        entry.timer = loop.call_later(self.idle_timeout, self._expire, sandbox_id, entry)
        entries.append(entry)

    def _expire(self, sandbox_id: str, entry: _Idle) -> None:
        """Close a client idle for ``idle_timeout`` seconds (a timer on its loop)."""
        entries = self._idle.get(sandbox_id, [])
        if entry in entries:
            entries.remove(entry)
            if not entries:
                self._idle.pop(sandbox_id, None)
            log.debug(
                "closing a client of sandbox %s's kernel idle for %.1f s",
                sandbox_id,
                time.monotonic() - entry.since,
            )
            self._close(entry.held)

    def _close_after(self, held: HeldClient, work: Coroutine[Any, Any, None] | None) -> None:
        """Close ``held`` once ``work`` (left by a run that went away) is done; now without."""
        if work is None:
            self._close(held)
            return
        task = asyncio.ensure_future(work)
        task.add_done_callback(lambda _: self._close(held))  # done, failed or cancelled
        self._finishing.add(task)  # held here: a task only the loop refers to may be collected
        task.add_done_callback(self._finishing.discard)

    def _close_idle(self, entry: _Idle) -> None:
        if entry.timer is not None:
            entry.timer.cancel()
        self._close(entry.held)

    def _close(self, held: HeldClient) -> None:
        try:
            held.close()
        except Exception:  # its descriptors are closed regardless (HeldClient.close)
            log.debug("closing a client of a sandbox's kernel failed", exc_info=True)
        self.counts.closed += 1


async def _drain(client: PinnedKernelClient) -> None:
    """Read off, without waiting and without decoding, what came to an idle client's sockets:
    others' output on iopub (a notebook on the same kernel). Its own run's messages all came
    before it was given back; whatever arrives later, the next run skips by its msg_id."""
    for channel in (client.iopub_channel, client.shell_channel, client.control_channel):
        socket = channel.socket
        if socket is None:
            continue
        for _ in range(MAX_DRAINED):
            try:
                await socket.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                break
