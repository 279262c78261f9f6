"""Plain zmq sockets served from the asyncio loop's own thread, without zmq.asyncio.

Why: through zmq.asyncio, each relayed message cost a future, a poll and several callbacks on
both the receiving and the sending socket, which made up most of the proxy's added latency.
Here every socket is a plain socket used only with NOBLOCK, and the loop merely calls the
reactor when one of their file descriptors turns readable.

A zmq socket's file descriptor is edge-triggered in effect: it signals that the socket's state
*changed*, and any operation on the socket (a send included) may consume that signal while
leaving messages to read. So the reactor asks the socket itself (ZMQ_EVENTS) and serves it until
it has nothing left to read; and every socket something was sent on ("touched") is asked again
afterwards, since that send may have eaten its signal. Asking only the sockets concerned, rather
than zmq_poll over all of them, saves a system call per socket per wake-up.

Everything runs on the loop's thread, so handlers may touch the proxy's state and the loop
freely, and the proxy's own messages need no marshalling: ``send`` from anywhere on the loop.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Sequence

import zmq
from zmq.backend import Socket as BaseSocket

log = logging.getLogger(__name__)

Socket = zmq.Socket[bytes]
# A handler receives one message from its socket (which is readable) and does what it must.
Handler = Callable[[Socket], None]

# Plain ints: flags and options given as zmq's enums cost an enum operation per call.
NOBLOCK = int(zmq.NOBLOCK)
MORE = int(zmq.NOBLOCK | zmq.SNDMORE)
EVENTS = int(zmq.EVENTS)
POLLIN = int(zmq.POLLIN)
BATCH = 256  # messages served from one socket before yielding, so a flood cannot starve timers


def recv_frames(sock: Socket) -> list[zmq.Frame | bytes]:
    """The frames of one message from a readable socket, without copying them.

    Socket.recv_multipart asks the socket for RCVMORE after each frame; a received Frame
    already knows (``more``), which halves the calls into libzmq.
    """
    frame = sock.recv(NOBLOCK, copy=False)
    frames: list[zmq.Frame | bytes] = [frame]
    while frame.more:
        frame = sock.recv(NOBLOCK, copy=False)
        frames.append(frame)
    return frames


def send_frames(sock: Socket, frames: Sequence[zmq.Frame | bytes]) -> None:
    """Send one message without blocking (zmq.Again if the socket takes none now).

    Frames go to the Cython socket's send directly: Socket.send_multipart type-checks every
    frame and Socket.send re-dispatches each one, which together cost more than the sending.
    Only the first frame can raise zmq.Again; libzmq takes the rest of a message it started.
    """
    send = BaseSocket.send
    for frame in frames[:-1]:
        send(sock, frame, MORE, copy=False)
    send(sock, frames[-1], NOBLOCK, copy=False)


class Reactor:
    """Serves each watched socket's messages to its handler, on the event loop's thread."""

    def __init__(self) -> None:
        self._handlers: dict[Socket, Handler] = {}
        self._paused: dict[Socket, Handler] = {}
        self._touched: set[Socket] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._kicked: asyncio.Handle | None = None
        self._serving = False

    def watch(self, sock: Socket, handler: Handler) -> None:
        """Serve ``sock`` with ``handler`` from now on (until ``pause`` or ``close``)."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        self._handlers[sock] = handler
        self._loop.add_reader(sock.fileno(), functools.partial(self._readable, sock))
        self._touch(sock)  # messages may have queued before the socket was watched

    def pause(self, sock: Socket) -> None:
        """Stop reading ``sock`` (its messages wait in its queue) until ``resume``."""
        handler = self._handlers.pop(sock, None)
        if handler is not None and self._loop is not None:
            self._loop.remove_reader(sock.fileno())
            self._paused[sock] = handler

    def resume(self, sock: Socket) -> None:
        handler = self._paused.pop(sock, None)
        if handler is not None:
            self.watch(sock, handler)

    def send(self, sock: Socket, frames: Sequence[zmq.Frame | bytes]) -> None:
        """Send one message on ``sock`` without blocking (zmq.Again if it takes none now)."""
        try:
            send_frames(sock, frames)
        finally:
            self._touch(sock)

    def _touch(self, sock: Socket) -> None:
        self._touched.add(sock)
        # Within a wake-up, touched sockets are served before it ends; outside one (the
        # proxy's own messages, a socket newly watched) a callback soon serves them.
        if not self._serving and self._kicked is None and self._loop is not None:
            self._kicked = self._loop.call_soon(self._readable, None)

    def _readable(self, sock: Socket | None) -> None:
        if sock is None:
            self._kicked = None
        self._serving = True
        try:
            if sock is not None:
                self._serve(sock)
            while self._touched:
                self._serve(self._touched.pop())
        finally:
            self._serving = False

    def _serve(self, sock: Socket) -> None:
        for _ in range(BATCH):
            handler = self._handlers.get(sock)  # gone if a handler paused its own socket
            if handler is None or not int(sock.getsockopt(EVENTS)) & POLLIN:
                return
            try:
                handler(sock)
            except Exception:
                # A bug in one message's handling must not stop the relay.
                log.exception("handling a message failed; it was dropped")
        # More waits: come back after the loop's other callbacks (timers, the watcher).
        assert self._loop is not None
        self._loop.call_soon(self._readable, sock)

    def close(self) -> None:
        if self._kicked is not None:
            self._kicked.cancel()
            self._kicked = None
        if self._loop is not None and not self._loop.is_closed():
            for sock in self._handlers:
                self._loop.remove_reader(sock.fileno())
        self._handlers.clear()
        self._paused.clear()
        self._touched.clear()
