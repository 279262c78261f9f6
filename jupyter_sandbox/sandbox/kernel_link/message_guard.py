"""The server's ZMQ sockets reach a sandbox's kernel through a guard that bounds each message.

The server is one process for all owners, and its clients of sandbox kernels (code runs over
REST, the E2B API and MCP; the readiness wait; a restart's shutdown request) receive what the
kernels send. ZMQ holds every part of a message until the last has come, however many there
are, so a kernel could make the server hold gigabytes with one message of many small parts.
The proxy kernels bound their own processes instead (kernel/memory_bound.py); the server cannot
end itself as they do.

So the client's sockets connect, one per channel, to a listening Unix socket of this process
(an abstract address; a connection from any other process is refused by its peer credentials),
and each connection is joined to the kernel's pinned socket (socket_pin.py). What the kernel
sends is read as ZMTP frames on the way (zmtp_frames.py), and the connection is closed before
a frame that would take a message past ``max_message_bytes``: libzmq drops the unfinished
message, connects again, and the guard joins that connection to the kernel afresh. What the
client sends passes unread.

Each socket also takes at most one whole message ahead of its reader (``ZMQ_RCVHWM`` of 1, set
by the caller): past it the guard stops reading the kernel, and a kernel that goes on sending
fills its own buffers, not the server's. So a connection holds at most two messages' bound at
any time (one queued, one coming), and a sandbox's idle client no more than that.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import struct
from collections.abc import Iterable
from typing import cast

from jupyter_sandbox.sandbox.host.log_throttle import ThrottledWarning
from jupyter_sandbox.sandbox.kernel_link.socket_pin import PinnedSockets
from jupyter_sandbox.sandbox.kernel_link.zmtp_frames import ZmtpError, ZmtpReader
from jupyter_sandbox.sandbox.limits import format_size

log = logging.getLogger(__name__)

_PEER_CREDENTIALS = struct.Struct("3i")  # pid, uid, gid (SO_PEERCRED)


class MessageGuard:
    """Listening sockets for ``channels`` of the kernel ``pins`` reaches, each joined to the
    kernel's socket as the client connects; :meth:`endpoint` is the address the client's ZMQ
    socket connects to. Made and closed on the running event loop, whose callbacks serve it."""

    def __init__(
        self, pins: PinnedSockets, channels: Iterable[str], *, max_message_bytes: int
    ) -> None:
        self._pins, self.max_message_bytes = pins, max_message_bytes
        self._loop = asyncio.get_running_loop()
        self._listeners: dict[str, tuple[socket.socket, str]] = {}
        self._joins: set[_Join] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._refused = 0  # connections from other processes
        self.cut_messages = 0  # messages refused (their connections cut), for runs to tell
        self.cuts = ThrottledWarning(log)
        try:
            for channel in channels:
                name = f"jupyter-sandbox-{secrets.token_hex(16)}"
                listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self._listeners[channel] = (listener, name)
                listener.setblocking(False)
                listener.bind(f"\0{name}")
                listener.listen(8)
                self._loop.add_reader(listener.fileno(), self._accept, channel, listener)
        except BaseException:
            self.close()
            raise

    def cut_notice(self) -> str:
        """What a run whose kernel sent a message past the bound is told."""
        return (
            f"\n[jupyter-sandbox] the kernel sent this run a message of more than "
            f"{format_size(self.max_message_bytes)}; it was dropped. Write large results to a "
            "file in the sandbox and read it through the files API instead.\n"
        )

    def endpoint(self, channel: str) -> str:
        """The ZMQ endpoint (``ipc://@…``, Linux's abstract addresses) of ``channel``."""
        return f"ipc://@{self._listeners[channel][1]}"

    def close(self) -> None:
        """Stop listening and cut every joined connection; again is a no-op."""
        for listener, _ in self._listeners.values():
            with contextlib.suppress(ValueError, OSError):  # closed already
                self._loop.remove_reader(listener.fileno())
            listener.close()
        self._listeners = {}
        for task in self._tasks:
            task.cancel()
        for join in list(self._joins):
            join.cut()

    def _accept(self, channel: str, listener: socket.socket) -> None:
        """Take every connection waiting (uvloop's readiness callbacks may not come again for
        one left in the backlog, and libzmq would wait out its handshake limit on it)."""
        while True:
            try:
                conn, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            pid, _, _ = _PEER_CREDENTIALS.unpack(
                conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEER_CREDENTIALS.size)
            )
            if pid != os.getpid():  # the address is abstract: any process on the host may call
                self._refused += 1  # said once: whoever calls again could fill the log
                log.log(
                    logging.WARNING if self._refused == 1 else logging.DEBUG,
                    "refused a connection to a kernel's guard from process %s (%d so far)",
                    pid,
                    self._refused,
                )
                conn.close()
                continue
            conn.setblocking(False)
            task = self._loop.create_task(self._join(channel, conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _join(self, channel: str, conn: socket.socket) -> None:
        """Join the client's connection ``conn`` to the kernel's socket of ``channel``."""
        kernel = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        kernel.setblocking(False)
        join = _Join(self, ZmtpReader(self.max_message_bytes), channel, (kernel, conn))
        try:
            await self._loop.sock_connect(kernel, self._pins.path(channel))
            await self._loop.create_unix_connection(lambda: join.kernel, sock=kernel)
            await self._loop.create_unix_connection(lambda: join.client, sock=conn)
        except OSError:  # the kernel is not there (yet, or any more): the client tries again
            join.cut()
            return
        except BaseException:
            join.cut()
            raise
        if join.ended:  # the kernel's side closed while the client's was being joined
            join.close_transports()
            return
        self._joins.add(join)
        join.start()

    def _ended(self, join: _Join) -> None:
        self._joins.discard(join)


class _Join:
    """One client connection joined to the kernel: two halves, each writing to the other's
    transport, each pausing the other's reading while its own writes are backed up."""

    def __init__(
        self,
        guard: MessageGuard,
        reader: ZmtpReader,
        channel: str,
        sockets: tuple[socket.socket, socket.socket],
    ) -> None:
        self.guard, self.channel, self._sockets = guard, channel, sockets
        self.kernel = _Half(self, reader)
        self.client = _Half(self, None)
        self.kernel.peer, self.client.peer = self.client, self.kernel
        self.started = self.ended = False

    def start(self) -> None:
        """Both halves are connected: pass on what came before, and let the bytes flow."""
        self.started = True
        for half in (self.kernel, self.client):
            if half.early and half.peer.transport is not None:
                half.peer.transport.write(b"".join(half.early))
                half.early.clear()
        for half in (self.kernel, self.client):
            if half.transport is not None and not self.ended and not half.held:
                half.transport.resume_reading()

    def refuse(self, error: ZmtpError) -> None:
        # ZMQ connects again at once, and the kernel may send the same again: said once a while.
        self.guard.cuts.warning(
            "cut", "cut a sandbox kernel's %s connection: %s", self.channel, error
        )
        self.guard.cut_messages += 1
        self.cut()

    def cut(self) -> None:
        """Close both connections at once, dropping what was not sent yet."""
        if self.ended:
            return
        self.ended = True
        for half in (self.kernel, self.client):
            if half.transport is not None:
                half.transport.abort()  # no longer polled, from here on
        for sock in self._sockets:  # closed now, not at the loop's next turn
            sock.close()
        self.guard._ended(self)

    def ended_cleanly(self) -> None:
        """One side closed: close the other after what it still has to write."""
        if self.ended:
            return
        self.ended = True
        self.close_transports()
        self.guard._ended(self)

    def close_transports(self) -> None:
        for half in (self.kernel, self.client):
            if half.transport is not None:
                half.transport.close()


class _Half(asyncio.Protocol):
    """One side of a join; ``reader`` reads what arrives here, when that side is the kernel."""

    peer: _Half

    def __init__(self, join: _Join, reader: ZmtpReader | None) -> None:
        self.join, self.reader = join, reader
        self.transport: asyncio.Transport | None = None
        self.early: list[bytes] = []  # read before the join started
        self.held = False  # reading paused while the peer's writes are backed up

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (asyncio's, or uvloop's in a proxy kernel: not its subclass).
        self.transport = cast(asyncio.Transport, transport)
        self.transport.pause_reading()  # until both halves are there (_Join.start)

    def data_received(self, data: bytes) -> None:
        if self.join.ended:
            return
        if self.reader is not None:
            try:
                self.reader.feed(data)
            except ZmtpError as exc:
                self.join.refuse(exc)
                return
        if self.join.started and self.peer.transport is not None:
            self.peer.transport.write(data)
        else:  # uvloop reads before a pause asked for in connection_made takes hold
            self.early.append(data)
            if self.transport is not None:
                self.transport.pause_reading()

    def eof_received(self) -> bool:
        self.join.ended_cleanly()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.join.ended_cleanly()

    def pause_writing(self) -> None:
        self.peer.held = True
        if self.peer.transport is not None and not self.join.ended:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        self.peer.held = False
        if self.peer.transport is not None and self.join.started and not self.join.ended:
            self.peer.transport.resume_reading()
