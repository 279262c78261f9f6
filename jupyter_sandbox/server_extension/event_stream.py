"""Answers sent as Server-Sent Events, as they come: what ``"stream": true`` gives a command
(command_handlers.py) and a code run (code_handlers.py), and ``?follow=true`` a background
command's output (background_handlers.py).

These routes stream the same way, so the rules live here once. The core hands a handler an
async generator of (name, JSON data) events (sandbox/operations/command_stream.py, sandbox/operations/code_runs.py,
sandbox/operations/background_follow.py);
this sends each as one event, waiting for the client to take it, so a client that reads slowly
holds the producer back instead of filling the server's memory. The status and headers go out
with the first event: what fails before it (an unknown or paused sandbox, a bad request) is an
ordinary JSON error answer. A client that closes the connection has the generator closed, which
stops what produced the events (kills the command, interrupts the code; a background command's
follower stops reading, and the command runs on), so nothing runs on for nobody.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, Protocol, TypeVar

from tornado.iostream import StreamClosedError

from jupyter_sandbox.protocol.errors import TooManyStreamsError
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.server_extension.base import ExtensionServices, SandboxAPIHandler

log = logging.getLogger(__name__)

EVENT_STREAM = "text/event-stream"

# (name, data): command_stream.Event and code_runs.Event alike.
Event = tuple[str, dict[str, Any]]


class RunRequest(Protocol):
    """A request whose answer may be streamed: CommandRequest, CodeRequest."""

    @property
    def stream(self) -> bool: ...


class RunResult(Protocol):
    """A run's result as answered whole: CommandResult, CodeResult."""

    def as_dict(self) -> dict[str, Any]: ...


Request = TypeVar("Request", bound=RunRequest)


def stream_turn(
    extension: ExtensionServices, owner: str
) -> contextlib.AbstractContextManager[None]:
    """One of ``owner``'s event streams held while in the block (an SSE stream, a code run of
    this API, an E2B stream or run): TooManyStreamsError (429) at once past
    SandboxExtension.max_event_streams_per_owner or max_event_streams."""
    return extension.event_streams.holding(
        owner,
        extension.max_event_streams_per_owner,
        extension.max_event_streams,
        TooManyStreamsError,
    )


def sse_event(name: str, data: dict[str, Any]) -> bytes:
    """One Server-Sent Event: its name, and its data as JSON on one ``data:`` line (JSON
    escapes every line break in a string, so a text with many lines is still one line)."""
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


class EventStreamHandler(SandboxAPIHandler):
    """A REST handler that may answer with a stream of events (:meth:`send_events`), stopped
    when its client leaves."""

    # The task sending the events; cancelled when the client leaves, unless it is already
    # closing the stream (a second cancellation would cut short the stop of what produced them:
    # a command's kill, a code run's interrupt).
    _sending: asyncio.Task[None] | None = None
    _closing = False

    async def answer_run(
        self,
        sandbox_id: str,
        request: Request,
        run: Callable[[SandboxManager, str, str, Request], Awaitable[RunResult]],
        stream: Callable[[SandboxManager, str, str, Request], AsyncGenerator[Event, None]],
        what: str,
        *,
        counted: bool = False,
    ) -> None:
        """Answer a request that runs something in ``sandbox_id`` (a command, code): with its
        result once ``run`` ended, or, when the request asks to ``stream``, with the events of
        ``stream`` as they come (``what`` as send_events has it). ``counted``: a run answered
        whole holds one of the owner's event streams too while it lasts (:meth:`stream_turn`),
        taken before it starts."""
        if not request.stream:
            with self.stream_turn() if counted else contextlib.nullcontext():
                result = await run(self.manager, self.owner, sandbox_id, request)
            self.write_json(result.as_dict())
            return
        events = stream(self.manager, self.owner, sandbox_id, request)
        await self.send_events(events, what)

    def stream_turn(self) -> contextlib.AbstractContextManager[None]:
        """Hold one of the owner's event streams while in the block; TooManyStreamsError (429)
        at once when the owner (or the server) has as many as it may."""
        return stream_turn(self.extension, self.owner)

    async def send_events(self, events: AsyncGenerator[Event, None], what: str) -> None:
        """Send ``events`` to the client as they come, until the last or until the client
        leaves (``what``, e.g. "its command in SANDBOX", is logged as stopped). An error raised
        before the first event is raised here, for the usual error answer; so is a stream one
        more than the owner (or the server) may have open (TooManyStreamsError, 429)."""
        with contextlib.ExitStack() as held:
            try:
                held.enter_context(self.stream_turn())
            except TooManyStreamsError:
                await events.aclose()  # not begun: nothing was started
                raise
            # A task of its own, so that on_connection_close can stop it without cancelling
            # the handler itself (tornado does not expect that of its request's coroutine).
            self._sending = asyncio.ensure_future(self._send(events))
            await asyncio.wait({self._sending})
        if self._sending.cancelled():
            log.info("the client left %s: %s was stopped", self.request.path, what)
            return
        self._sending.result()

    async def _send(self, events: AsyncGenerator[Event, None]) -> None:
        begun = False
        try:
            async for name, data in events:
                if not begun:  # the status and headers go with the first event
                    begun = True
                    self.set_header("Content-Type", EVENT_STREAM)
                    self.set_header("Cache-Control", "no-cache")
                    self.set_header("X-Accel-Buffering", "no")  # nginx in front: do not hold events
                self.write(sse_event(name, data))
                await self.flush()  # waits for the client: a slow one slows the producer
            self.finish(set_content_type=EVENT_STREAM)
        except StreamClosedError:
            log.info("the client left %s while it was being written to", self.request.path)
        finally:
            self._closing = True
            await events.aclose()  # stops what produced the events if it still runs

    def on_connection_close(self) -> None:
        if self._sending is not None and not self._closing:
            self._sending.cancel()
        super().on_connection_close()
