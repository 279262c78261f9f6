"""A background command's output followed as it comes: what ``GET .../commands/{command_id}/
output?follow=true`` streams (server_extension/background_handlers.py), and what ``jupyter
sandbox background output --follow`` prints (cli/background.py).

Kept apart from background.py, which starts, reads, and stops: following is only repeated
reads (``BackgroundCommands.output``) and the rule of when to read again. The command's output
is a log in the sandbox that nothing announces growth of, so the host polls it; doing that here,
next to the sandbox, rather than in every client, means one stream per follower instead of a
request every half second, and output seen within 50 ms of its writing instead of 500.

The events have the shape of command_stream.py's, so that the three streams (a command, a code
run, a background command) look alike to clients: pieces of ``output``, then ``result`` (the
command as ``GET .../commands/{command_id}`` shows it: its exit code) or ``error``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from typing import Protocol

from jupyter_sandbox.protocol.errors import SandboxError
from jupyter_sandbox.sandbox.operations.background_records import BackgroundCommand, CommandOutput
from jupyter_sandbox.sandbox.operations.command_stream import Event, final_event

# Seconds between two reads that found nothing new: the first wait is short, so output that
# comes soon after a silence is seen soon, and it doubles up to the longest, so a command
# silent for long costs a read every half second at most. Any output resets it.
FIRST_WAIT = 0.05
LONGEST_WAIT = 0.5
# Seconds without an event after which an empty piece is sent (its offsets those of the next):
# a follower of a silent command still hears from the server, so neither its own read timeout
# (the Python client's: 120 s) nor a proxy's idle timeout (nginx's: 60 s) cuts the stream.
HEARTBEAT = 15.0


class BackgroundReads(Protocol):
    """What following needs of background.py's BackgroundCommands: its two reads (named here,
    not imported, as background.py imports this module)."""

    async def get(self, owner: str, sandbox_id: str, command_id: str) -> BackgroundCommand: ...

    async def output(
        self, owner: str, sandbox_id: str, command_id: str, offset: int = 0, limit: int = ...
    ) -> CommandOutput: ...


async def follow_output(
    background: BackgroundReads,
    owner: str,
    sandbox_id: str,
    command_id: str,
    offset: int = 0,
) -> AsyncGenerator[Event, None]:
    """The command's output from byte ``offset`` on, as it is written: ("output", {"text",
    "offset", "next_offset"}) for each new piece, ``offset`` the byte it starts at, until the
    command has ended and all its output was read; then ("result", the command as a dict, with
    its ``exit_code``).

    A SandboxError before the first event is raised (an unknown command or sandbox, a paused
    one, a negative offset: the caller answers with an ordinary error); after it, it is the
    last event, ``error`` (the command was removed, the sandbox stopped). Closing the generator
    stops only the following: the command runs on. Each read is activity, as any read of the
    output is, so a followed command keeps its sandbox from its idle timeout.
    """
    ended: asyncio.Future[BackgroundCommand] = asyncio.get_running_loop().create_future()
    sent = False
    wait = FIRST_WAIT
    last_event = time.monotonic()
    try:
        while True:
            piece = await background.output(owner, sandbox_id, command_id, offset)
            if piece.text or time.monotonic() - last_event >= HEARTBEAT:
                sent = True
                last_event = time.monotonic()
                positions = {"offset": piece.offset, "next_offset": piece.next_offset}
                yield "output", {"text": piece.text, **positions}
            grew = piece.next_offset > offset
            offset = piece.next_offset
            # Found ended before its read (output() looks first): that read had all of it.
            if not piece.running and offset >= piece.size:
                break
            if grew:  # more may be there already: read again at once
                wait = FIRST_WAIT
                continue
            await asyncio.sleep(wait)
            wait = min(wait * 2, LONGEST_WAIT)
        ended.set_result(await background.get(owner, sandbox_id, command_id))
    except SandboxError as error:
        ended.set_exception(error)
    yield final_event(ended, sent)
