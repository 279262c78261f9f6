"""The run watcher: a host process per ``jupyter sandbox run`` that interrupts the run's code
once the CLI process is gone without having seen the run end (SIGKILL included).

A run's code executes in the sandbox's live interpreter, which notebooks and other runs share
(code_runs.py). A CLI that is interrupted or fails interrupts its code itself
(kernel_execution.execute, on cancellation). One killed with SIGKILL can do nothing, and the
kernel runs the code on: to its end, or for good, with every later run and cell queued behind
it. So the CLI starts this process first, as ``exec`` starts its exec watcher and a kernel its
lifeline (watcher_pipe.py): in a session of its own, on a pipe only the CLI holds.

The kernel runs one request at a time and an interrupt stops whatever runs then, so the watcher
must know that the CLI's run is what runs: an interrupt a moment late would stop the next
caller's code (a notebook's cell). The protocol has no way to ask a kernel what it runs, so the
watcher follows the kernel's iopub from before the CLI sends its request (the CLI waits for
its :data:`READY` line): each request's ``execute_input`` says it started, its ``status: idle``
that it ended. The CLI writes the request's message id into the pipe once it is sent, and
``DONE`` once the run ended or it dealt with it. At end of file without ``DONE``, the watcher
interrupts the run if it started and has not ended, or once it starts if it is still queued,
as the CLI itself would have (kernel_execution._stop_for_nobody); a run that ended is left.

Everything on iopub comes from the sandbox, whose code knows the kernel's key: it could make
the watcher believe its run ended (its own code then runs on) or started (its own kernel is
interrupted), nothing it could not do itself. The ids remembered are bounded
(:data:`MAX_SEEN`). While the run lasts the watcher holds a kernel client, as the CLI does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import re
import sys
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from jupyter_sandbox.protocol.errors import SandboxError
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.host.watcher_pipe import (
    DONE,
    WatcherPipe,
    ended_in_order,
    log_to_stderr,
)
from jupyter_sandbox.sandbox.identity import check_sandbox_id
from jupyter_sandbox.sandbox.kernel_link.execution import (
    INTERRUPT_GRACE,
    MessageChannel,
    interrupt,
    received,
)
from jupyter_sandbox.sandbox.kernel_link.link import (
    HeldClient,
    open_ready_client,
    with_socket_prefix,
)

log = logging.getLogger(__name__)

READY = b"ready\n"  # the watcher's line to the CLI once it follows the kernel's iopub
READY_SECONDS = 30.0  # how long the CLI waits for it; past it the run goes on unwatched
CONNECT_SECONDS = 20.0  # for the watcher to reach the kernel (within READY_SECONDS)
WATCH_SECONDS = 0.5  # how often the watcher looks at the pipe and the sandbox while it follows
MAX_SEEN = 1024  # request ids remembered as started or ended, before the run's own is known
# jupyter_client's message ids (hex, "-" and "_"); never DONE, which may come where one would.
_MESSAGE_ID = re.compile(rb"[0-9A-Za-z_-]{1,128}")


class RunWatcher(WatcherPipe):
    """The CLI's end of the pipe whose read end the run watcher waits on."""

    @classmethod
    def start(cls, state_dir: Path, sandbox_id: str) -> RunWatcher:
        """Start the watcher of a run about to be sent to ``sandbox_id``'s kernel."""
        return cls.spawn(
            "jupyter_sandbox.sandbox.operations.run_watcher",
            str(state_dir),
            sandbox_id,
            answers=True,
        )

    watching = False  # whether the watcher follows the kernel's iopub (it said READY)

    async def before_send(self) -> None:
        """Wait (up to :data:`READY_SECONDS`) for the watcher to follow the kernel's iopub: it
        must see the run start. Past that, or if it failed, the run goes unwatched."""
        self.watching = await self.answer(READY_SECONDS) == READY

    def sent(self, message_id: str) -> None:
        """The run's request went out with ``message_id``."""
        if self._write_fd is None or not self.watching:
            return
        with contextlib.suppress(OSError):  # the watcher is gone: the run goes on unwatched
            os.write(self._write_fd, message_id.encode("ascii") + b"\n")


class Requests:
    """The kernel's requests seen starting and ending on iopub (the latest :data:`MAX_SEEN`).

    :meth:`follow` is the one reader of the client's iopub for the watcher's whole life: a read
    cancelled while its message was being received loses that message (the socket gave it up,
    the awaiting task never resumed), and the message lost could be the run's own
    ``execute_input``, which the watcher would then wait for while the code ran on."""

    def __init__(self) -> None:
        self.started: OrderedDict[str, None] = OrderedDict()
        self.ended: OrderedDict[str, None] = OrderedDict()
        self.news = asyncio.Event()  # set each time a message is noted

    def note(self, message: dict[str, Any]) -> None:
        parent = message.get("parent_header")
        message_id = parent.get("msg_id") if isinstance(parent, dict) else None
        if not isinstance(message_id, str) or not _MESSAGE_ID.fullmatch(message_id.encode()):
            return
        content = message.get("content")
        if message.get("msg_type") == "execute_input":
            _remember(self.started, message_id)
        elif (
            message.get("msg_type") == "status"
            and isinstance(content, dict)
            and content.get("execution_state") == "idle"
        ):
            _remember(self.ended, message_id)

    async def follow(self, channel: MessageChannel) -> None:
        """Note everything ``channel`` receives, until cancelled (the watcher is done)."""
        while True:
            self.note(await channel.get_msg(timeout=None))
            self.news.set()

    async def wait_for_news(self, seconds: float) -> None:
        """Return once a message was noted since the last call, or after ``seconds``."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.news.wait(), seconds)
        self.news.clear()


def _remember(seen: OrderedDict[str, None], message_id: str) -> None:
    seen[message_id] = None
    while len(seen) > MAX_SEEN:
        seen.popitem(last=False)


def read_run(stdin_fd: int) -> tuple[str | None, bool]:
    """What the CLI wrote: its run's message id (None if it sent none) and whether it ended in
    order (``DONE``); returns once the CLI closed its end of the pipe or wrote ``DONE``."""
    line = b""
    while not line.endswith(b"\n"):
        piece = os.read(stdin_fd, 1)  # one byte at a time: DONE may follow the line
        if not piece:
            return None, False  # the CLI ended before it sent anything
        if piece == DONE and not line:
            return None, True
        line += piece
        if len(line) > 130:
            raise ValueError("expected the run's message id on the first line")
    message_id = line.removesuffix(b"\n")
    if not _MESSAGE_ID.fullmatch(message_id):
        raise ValueError("expected the run's message id on the first line")
    return message_id.decode("ascii"), ended_in_order(stdin_fd)


class NotWatched(Exception):
    """The watcher could not follow the kernel before the run (no such sandbox, its kernel
    not answering): the CLI says what is wrong with the sandbox, and runs unwatched if it can."""


async def watch(state_dir: Path, sandbox_id: str, stdin_fd: int) -> str:
    """Follow the kernel until the CLI's run is dealt with; what was done, for the log."""
    try:
        held, still_running = await _follow_kernel(state_dir, sandbox_id)
    except (SandboxError, OSError, ValueError) as exc:
        raise NotWatched(str(exc)) from None
    client = held.client
    try:
        os.write(sys.stdout.fileno(), READY)
        # Nothing more for the CLI there: its end sees end of file, and fd 1 stays taken.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        requests = Requests()
        reader = asyncio.ensure_future(requests.follow(client.iopub_channel))
        try:
            message_id, in_order = await asyncio.to_thread(read_run, stdin_fd)
            if in_order or message_id is None:
                return ""
            while message_id not in requests.started:
                if message_id in requests.ended:
                    return ""  # it ended (or was aborted) before it could be interrupted
                if reader.done():
                    reader.result()  # the kernel's iopub failed: raised, for the log
                reason = await still_running()
                if reason is not None:
                    return f"not interrupted: {reason}"
                await requests.wait_for_news(WATCH_SECONDS)
            if message_id in requests.ended:
                return ""
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
        interrupt(client)
        async for answer in received(client.control_channel, INTERRUPT_GRACE):
            if answer.get("msg_type") == "interrupt_reply":
                break
        return "interrupted the code of a jupyter sandbox run that ended before it"
    finally:
        held.close()


async def _follow_kernel(
    state_dir: Path, sandbox_id: str
) -> tuple[HeldClient, Callable[[], Awaitable[str | None]]]:
    """A client of ``sandbox_id``'s kernel once its iopub has joined, and what tells whether
    the interpreter it follows still runs."""
    directory = SandboxDirectory(state_dir, check_sandbox_id(sandbox_id))
    generation = int(directory.read_state().get("generation", 0))
    connection_info = with_socket_prefix(
        directory.read_connection_file(), directory.socket_prefix_of(generation)
    )

    async def still_running() -> str | None:
        """None while the interpreter the run was sent to still runs."""
        if not directory.exists():
            return "the sandbox was removed"
        if int(directory.read_state().get("generation", 0)) != generation:
            return "its interpreter was restarted"
        return None

    held, _ = await open_ready_client(
        connection_info, timeout=CONNECT_SECONDS, still_running=still_running, shell=False
    )
    return held, still_running


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jupyter_sandbox.sandbox.operations.run_watcher"
    )
    parser.add_argument("state_dir", type=Path)
    parser.add_argument("sandbox_id")
    args = parser.parse_args(argv)
    log_to_stderr("jupyter sandbox run watcher")
    if not args.state_dir.is_absolute():
        parser.error("the state directory must be an absolute path")
    try:
        done = asyncio.run(watch(args.state_dir, args.sandbox_id, sys.stdin.fileno()))
    except NotWatched as exc:  # quiet: the CLI reports what is wrong with the sandbox
        log.debug("not watching the run in sandbox %s: %s", args.sandbox_id, exc)
        return 1
    except (SandboxError, OSError, ValueError) as exc:  # the run is left as it is
        log.warning("stopped watching the run in sandbox %s: %s", args.sandbox_id, exc)
        return 1
    if done:
        log.info("%s (sandbox %s)", done, args.sandbox_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
