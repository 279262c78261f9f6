"""A command whose output is sent as it comes: ``"stream": true`` in a command request, as
E2B's ``commands.run(on_stdout=...)`` and OpenSandbox's SSE command API offer.

Kept apart from commands.py, which answers once a command has ended, with its whole output:
here the output crosses from the engine's executor thread, where it is read, to the event loop,
where it is sent, and what that takes is this module's alone. The crossing is a bounded queue
(QUEUE_CHUNKS): a reader slower than the command holds the executor thread, so the command's
pipe fills and the command waits, and the server's memory stays bounded with no cap on the
output. A reader that goes away (the consumer of :func:`stream_command` closes it) stops the
command with everything it started: the exec's wait is cancelled, which kills its marked
processes (docker_exec.ExecWatch). The events are plain values; the REST handler
(server_extension/command_handlers.py) sends them as Server-Sent Events.
"""

from __future__ import annotations

import asyncio
import codecs
from collections.abc import AsyncGenerator
from typing import Any

from .commands import CommandRequest, run_command
from .errors import SandboxError
from .manager import SandboxManager

# Pieces of output on their way from the engine's thread to the reader: each is one frame of
# the engine's stream (the engine sends at most 32 KiB at a time), so about 1 MiB in all.
QUEUE_CHUNKS = 32
STREAMS = ("stdout", "stderr")

# (name, data): ("stdout" | "stderr", {"text": ...}), then ("result", CommandResult.as_dict()),
# or ("error", SandboxError.to_dict()) when the command failed after output was sent.
Event = tuple[str, dict[str, Any]]


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


class _Channel:
    """The bounded queue between the engine's thread (:meth:`send`) and the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue(QUEUE_CHUNKS)
        self._closed = False

    def send(self, stream: str, data: bytes) -> None:
        """On the engine's executor thread: wait until the queue takes the piece."""
        asyncio.run_coroutine_threadsafe(self._put((stream, data)), self._loop).result()

    async def _put(self, piece: tuple[str, bytes]) -> None:
        if self._closed:  # checked on the loop, so no put starts after close() drained
            raise _ReaderGone
        await self._queue.put(piece)

    async def next(self, run: asyncio.Future[Any]) -> tuple[str, bytes] | None:
        """The next piece, or None once ``run`` (the exec, which sends) has ended and every
        piece it sent was taken: the thread waits for each piece to be queued before it goes
        on, so all of them are queued by the time the exec returns."""
        while self._queue.empty() and not run.done():
            getter = asyncio.ensure_future(self._queue.get())
            try:
                await asyncio.wait({getter, run}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                getter.cancel()  # a getter cancelled as it was woken leaves its piece queued
            if getter.done() and not getter.cancelled():
                return getter.result()
        return None if self._queue.empty() else self._queue.get_nowait()

    def close(self) -> None:
        """Take nothing more: a send waiting for room is let through (the queue is emptied),
        and every later one raises _ReaderGone, so the engine's thread is never left waiting."""
        self._closed = True
        while not self._queue.empty():
            self._queue.get_nowait()


async def stream_command(
    manager: SandboxManager, owner: str, sandbox_id: str, request: CommandRequest
) -> AsyncGenerator[Event, None]:
    """Run ``request`` in the owner's sandbox, yielding its output as it comes, then its result.

    A SandboxError before the first event is raised (the caller can still answer with an
    error: an unknown or paused sandbox, a missing cwd); after it, it is the last event,
    ``error``. The result's stdout and stderr are empty: they were the events. Closing this
    generator early (``aclose``, as a consumer whose reader left must) stops the command and
    everything it started before it returns (within exec_deadline.KILL_SECONDS).
    """
    channel = _Channel(asyncio.get_running_loop())
    run = asyncio.ensure_future(
        run_command(manager, owner, sandbox_id, request, output=channel.send)
    )
    decoder = OutputDecoder()
    sent = False
    try:
        while (piece := await channel.next(run)) is not None:
            text = decoder.decode(*piece)
            if text:
                sent = True
                yield piece[0], {"text": text}
        for stream, text in decoder.flush():
            sent = True
            yield stream, {"text": text}
        try:
            result = run.result()
        except SandboxError as exc:
            if not sent:
                raise
            yield "error", exc.to_dict()
            return
        yield "result", result.as_dict()  # stdout and stderr empty: they were the events
    finally:
        channel.close()
        if not run.done():
            run.cancel()  # the exec's wait kills the command (docker_exec.ExecWatch.wait)
            await asyncio.wait({run})  # not `await run`: a cancellation of ours must go on
        if not run.cancelled():
            run.exception()  # taken, so that an error nobody wants any more is not logged
