"""A command whose output is sent as it comes: ``"stream": true`` in a command request, as
E2B's ``commands.run(on_stdout=...)`` and OpenSandbox's SSE command API offer.

Kept apart from commands.py, which answers once a command has ended, with its whole output:
here the output crosses from the engine's executor thread, where it is read, to the event loop,
where it is sent, and what that takes is this module's alone. The crossing is a bounded queue
(QUEUE_CHUNKS): a reader slower than the command holds the executor thread, so the command's
pipe fills and the command waits, and the server's memory stays bounded with no cap on the
output. A reader that goes away (the consumer of :func:`stream_command` closes it) stops the
command with everything it started: the exec's wait is cancelled, which kills its marked
processes (backends/docker/exec.py's ExecWatch). The events are plain values; the REST handler
(server_extension/command_handlers.py) sends them as Server-Sent Events.
"""

from __future__ import annotations

import asyncio
import codecs
import collections
import itertools
import operator
import threading
from collections.abc import AsyncGenerator
from typing import Any

from jupyter_sandbox.protocol.errors import SandboxError
from jupyter_sandbox.sandbox.operations.commands import CommandRequest, run_command
from jupyter_sandbox.sandbox.sandbox_access import SandboxAccess

# Pieces of output on their way from the engine's thread to the reader: each is one frame of
# the engine's stream (the engine sends at most 32 KiB at a time), so about 1 MiB in all.
QUEUE_CHUNKS = 32
STREAMS = ("stdout", "stderr")

# (name, data): ("stdout" | "stderr", {"text": ...}), then ("result", CommandResult.as_dict()),
# or ("error", SandboxError.to_dict()) when the command failed after output was sent.
Event = tuple[str, dict[str, Any]]


def final_event(run: asyncio.Future[Any], sent: bool) -> Event:
    """The last event of a stream whose ``run`` (a command's, a code run's) has ended:
    ("result", its result as a dict), or ("error", ...) for a SandboxError once events were
    sent; before any, the error is raised, so the client gets an ordinary error answer."""
    try:
        result = run.result()
    except SandboxError as exc:
        if not sent:
            raise
        return "error", exc.to_dict()
    return "result", result.as_dict()


class OutputDecoder:
    """Each stream's pieces as UTF-8 text, decoded incrementally: a character split between
    two pieces comes whole with the second, undecodable bytes become U+FFFD."""

    def __init__(self) -> None:
        self._decoders = {
            name: codecs.getincrementaldecoder("utf-8")(errors="replace") for name in STREAMS
        }

    def decode(self, stream: str, data: bytes) -> str:
        """The text ``data`` completes on ``stream`` (empty while a character is incomplete)."""
        return self._decoders[stream].decode(data)

    def flush(self) -> list[tuple[str, str]]:
        """What the streams still hold at their end (an incomplete character: U+FFFD)."""
        ends = [(name, decoder.decode(b"", final=True)) for name, decoder in self._decoders.items()]
        return [(name, text) for name, text in ends if text]


class _ReaderGone(Exception):
    """Raised on the engine's thread when the output has nobody left to take it."""


class Channel:
    """The bounded crossing between the engine's thread (:meth:`send`) and the event loop
    (also a directory watch's, file_watch.py).

        The thread hands each piece over without waiting for the loop to take it, and waits only
        for room (QUEUE_CHUNKS pieces): waiting on the loop for every piece, as a queue put from
        the thread would, made streamed output several times slower. The loop takes every piece
        that has arrived at once (:meth:`next`), so a fast command's output goes out in few events.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._pieces: collections.deque[tuple[str, bytes]] = collections.deque()
        self._room = threading.Semaphore(QUEUE_CHUNKS)
        self._arrived = asyncio.Event()
        self._closed = False

    def send(self, stream: str, data: bytes) -> None:
        """On the engine's executor thread: wait for room, then hand the piece over."""
        self._room.acquire()
        if self._closed:
            raise _ReaderGone
        self._loop.call_soon_threadsafe(self._arrive, (stream, data))

    def _arrive(self, piece: tuple[str, bytes]) -> None:
        if self._closed:
            return
        self._pieces.append(piece)
        self._arrived.set()

    async def next(self, run: asyncio.Future[Any]) -> list[tuple[str, bytes]] | None:
        """Every piece that has arrived (at least one, in order), or None once ``run`` (the
        exec, which sends) has ended and each of its pieces was taken. The thread hands each
        piece over before it goes on, and the loop runs what a thread hands over in order, so
        every piece has arrived by the time the loop sees the exec done."""
        while not self._pieces and not run.done():
            self._arrived.clear()
            arrival = asyncio.ensure_future(self._arrived.wait())
            try:
                await asyncio.wait({arrival, run}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                arrival.cancel()
        if not self._pieces:
            return None
        pieces = list(self._pieces)
        self._pieces.clear()
        self._room.release(len(pieces))
        return pieces

    def close(self) -> None:
        """Take nothing more: a send waiting for room is let through, and it and every later
        one raise _ReaderGone, so the engine's thread is never left waiting."""
        self._closed = True
        self._pieces.clear()
        self._room.release(QUEUE_CHUNKS + 1)  # more than any number of waiting senders needs

    async def close_and_stop(self, run: asyncio.Future[Any]) -> None:
        """Close, and stop ``run`` (the exec that sends) if it still runs: the exec's wait
        kills its process when cancelled (backends/docker/exec.py's ExecWatch.wait). For a stream's
        ``finally``, however the stream ended."""
        self.close()
        if not run.done():
            run.cancel()
            await asyncio.wait({run})  # not `await run`: a cancellation of ours must go on
        if not run.cancelled():
            run.exception()  # taken, so that an error nobody wants any more is not logged


def _joined(pieces: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """Consecutive pieces of one stream as one: one event each rather than one a frame."""
    return [
        (stream, b"".join(data for _, data in run))
        for stream, run in itertools.groupby(pieces, key=operator.itemgetter(0))
    ]


async def stream_command(
    manager: SandboxAccess, owner: str, sandbox_id: str, request: CommandRequest
) -> AsyncGenerator[Event, None]:
    """Run ``request`` in the owner's sandbox, yielding its output as it comes, then its result.

    A SandboxError before the first event is raised (the caller can still answer with an
    error: an unknown or paused sandbox, a missing cwd); after it, it is the last event,
    ``error``. The result's stdout and stderr are empty: they were the events. Closing this
    generator early (``aclose``, as a consumer whose reader left must) stops the command and
    everything it started before it returns (within exec_deadline.KILL_SECONDS).
    """
    channel = Channel(asyncio.get_running_loop())
    run = asyncio.ensure_future(
        run_command(manager, owner, sandbox_id, request, output=channel.send)
    )
    decoder = OutputDecoder()
    sent = False
    try:
        while (pieces := await channel.next(run)) is not None:
            for stream, data in _joined(pieces):
                text = decoder.decode(stream, data)
                if text:
                    sent = True
                    yield stream, {"text": text}
        for stream, text in decoder.flush():
            sent = True
            yield stream, {"text": text}
        yield final_event(run, sent)  # its stdout and stderr empty: they were the events
    finally:
        await channel.close_and_stop(run)  # kills the command if it still runs
