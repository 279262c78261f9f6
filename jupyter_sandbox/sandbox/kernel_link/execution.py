"""One execute_request to a sandbox's kernel, from the host, and everything it publishes.

The Jupyter protocol as a frontend speaks it, reduced to what a caller without a frontend
wants (code_runs.py): the code's output as events, in order, and the reply. An execution is
done when both its ``execute_reply`` (shell) and its ``status: idle`` (iopub) have arrived:
ipykernel publishes idle after the last of the code's output, so nothing is missed, whatever
order the two sockets deliver in. Only messages whose parent is this request count: the
kernel may be serving a notebook at the same time, whose output is none of this caller's.

``timeout`` counts from the code's start (its ``execute_input``), not from the request: the
kernel runs one request at a time, and a run queued behind a notebook's cell must not be the
reason that cell is interrupted. Past it the kernel is sent an ``interrupt_request`` on control
(ipykernel raises KeyboardInterrupt in the code, the reply says so) and given INTERRUPT_GRACE
seconds more; code that ignores the interrupt (stuck in C) is left running and reported as
such. A caller that goes away (cancels) has its code interrupted too, once it runs, so nothing
keeps running for nobody.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

from jupyter_sandbox.protocol.statuses import RunStatus, run_status
from jupyter_sandbox.sandbox.kernel_link.kernel_messages import RequestChannel, next_for
from jupyter_sandbox.sandbox.kernel_link.message_guard import MessageGuard
from jupyter_sandbox.sandbox.kernel_link.socket_pin import PinnedKernelClient
from jupyter_sandbox.sandbox.limits import format_size

log = logging.getLogger(__name__)

INTERRUPT_GRACE = 5.0  # seconds the kernel has to stop the code once interrupted
WATCH_SECONDS = 0.5  # how often the sandbox is looked at while its kernel runs the code
# The most of a message's content a run decodes, in bytes: the most output a code run's result
# holds (operations/code_runs.py MAX_OUTPUT). The sandbox writes it, and decoding costs the
# server's one event loop time and, for nested JSON, many times the bytes in memory; a message
# of the run's past it is dropped unread, and the run told (kernel_messages.py).
MAX_CONTENT_BYTES = 16 * 1024**2
# Terminal colour codes in IPython's tracebacks: noise to a program (or a model) reading them.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

# What the code published, in order: ("stdout" | "stderr", {"text"}), ("display", {"type":
# "display_data" | "execute_result" | "update_display_data", "data", "metadata", "transient"}),
# or ("clear", {"wait"}) when the code cleared its output (IPython.display.clear_output).
Output = Callable[[str, dict[str, Any]], None]
DISPLAY_TYPES = ("display_data", "execute_result", "update_display_data")


@dataclass
class KernelOutcome:
    """How the execution ended: the reply's status ("ok", "error", "aborted"), its execution
    count, the exception (name, value, traceback as plain text), whether the timeout
    interrupted it, and whether the code still runs (it ignored the interrupt)."""

    status: RunStatus = "ok"
    execution_count: int | None = None
    error: dict[str, Any] | None = None
    timed_out: bool = False
    still_running: bool = False
    duration: float = 0.0  # seconds from the request to its end
    queued: float = 0.0  # seconds of those it waited for code ahead of it to end
    began: float = 0.0  # when it started (time.monotonic()); 0 until then


class MessageChannel(Protocol):
    """A kernel client's channel, as jupyter_client's async clients have them."""

    async def get_msg(self, timeout: float | None = None) -> dict[str, Any]: ...


async def received(channel: MessageChannel, seconds: float) -> AsyncIterator[dict[str, Any]]:
    """The messages ``channel`` gets in the next ``seconds``, as they come; none after them
    (each wait is cut at the deadline, so a message after it never counts)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            yield await channel.get_msg(timeout=left)
        except queue.Empty:
            return


class SendObserver(Protocol):
    """Something that follows one request from outside: awaited before it is sent (it may have
    to get ready to see it), then told its message id."""

    async def before_send(self) -> None: ...

    def sent(self, message_id: str) -> None: ...


def plain_traceback(lines: list[str]) -> list[str]:
    """IPython's traceback lines without their terminal colours."""
    return [_ANSI.sub("", line) for line in lines]


async def execute(
    client: PinnedKernelClient,
    code: str,
    *,
    timeout: float,
    output: Output,
    still_running: Callable[[], Awaitable[str | None]],
    on_reason: Callable[[str], BaseException],
    observer: SendObserver | None = None,
    hand_over: Callable[[Coroutine[Any, Any, None]], None] | None = None,
) -> KernelOutcome:
    """Run ``code`` on ``client``'s kernel (shell, iopub and control started, iopub joined:
    kernel_link.ready_client, or a client kept from an earlier run: clients.py; either
    way the caller's alone while this runs), passing what it publishes to ``output`` as it
    comes. Returning without raising, and without an interrupt sent (neither ``timed_out``
    nor ``still_running``), means nothing of this request can still arrive on the client.

    ``timeout`` counts from the moment the code starts (its ``execute_input``): a request
    queued behind other code (a notebook's cell, another caller's run) waits for it, and is
    never the reason that code is interrupted. ``still_running`` is awaited every
    WATCH_SECONDS: None while the kernel can still answer, or why not (the sandbox stopped,
    the kernel was restarted), which ends the wait with ``on_reason(why)`` raised. Standard
    input is refused (``input()`` raises), and an error does not abort requests other callers
    have queued (``stop_on_error`` false). ``observer`` is awaited just before the request is
    sent and told its message id once it is (a CLI's run watcher: operations/run_watcher.py).
    """
    if observer is not None:
        await observer.before_send()
    guard = client.endpoints if isinstance(client.endpoints, MessageGuard) else None
    cut_before = guard.cut_messages if guard is not None else 0
    sent = time.monotonic()
    msg_id = client.execute(
        code, silent=False, store_history=True, allow_stdin=False, stop_on_error=False
    )
    if observer is not None:
        observer.sent(msg_id)
    outcome = KernelOutcome()
    began = asyncio.Event()
    lost = _Lost()  # messages of this request dropped unread
    abandoned = False  # the caller went away: what the code publishes goes nowhere

    def relayed(name: str, data: dict[str, Any]) -> None:
        if not abandoned:
            output(name, data)

    # Read until the request's idle status, and never given up while its code may still be
    # stopped: a read cancelled as its message arrived loses that message, which could be the
    # execute_input that says the code began (_stop_for_nobody waits for it).
    idle = asyncio.ensure_future(
        _published_until_idle(client, msg_id, relayed, outcome, began, lost)
    )
    reply = asyncio.ensure_future(_reply(client, msg_id, lost))
    deadline: float | None = None  # set once the code has started
    content: dict[str, Any] = {}
    finished = False
    try:
        while True:
            await asyncio.wait(
                {idle, reply}, timeout=_until(deadline), return_when=asyncio.FIRST_EXCEPTION
            )
            for task in (idle, reply):
                if task.done() and task.exception() is not None:
                    task.result()  # raised: the output was refused (OutputTooLargeError)
            if idle.done() and reply.done():
                content = reply.result()
                finished = True
                break
            if deadline is None and began.is_set():
                deadline = outcome.began + timeout
            if deadline is not None and time.monotonic() >= deadline:
                if outcome.timed_out:  # interrupted, and it did not stop within the grace
                    outcome.still_running = True
                    finished = True  # nothing more to interrupt: it ignores interrupts
                    log.info("code run in kernel did not stop when interrupted")
                    break
                outcome.timed_out = True
                interrupt(client)
                deadline = time.monotonic() + INTERRUPT_GRACE
                continue
            reason = await still_running()
            if reason is not None:
                finished = True
                raise on_reason(reason)
    finally:
        # The caller went away, or the output was refused: stop the code, unless its idle
        # status came already (then it has ended, and an interrupt would hit the next code).
        abandoned = not finished and not _ended(idle)
        reply.cancel()
        if not abandoned:
            idle.cancel()
        await asyncio.gather(reply, *(() if abandoned else (idle,)), return_exceptions=True)
        if abandoned:
            stop = _stop_for_nobody(client, idle, began, still_running)
            if hand_over is not None and not began.is_set():
                hand_over(stop)  # queued: stopped once it starts, the caller not kept
            else:
                await stop  # running: interrupted now, within INTERRUPT_GRACE
    if guard is not None and guard.cut_messages > cut_before and not abandoned:
        output("stderr", {"text": guard.cut_notice()})  # what it sent is lost: say so
    if lost.count and not abandoned:
        output("stderr", {"text": _dropped_notice(lost.count)})
    if outcome.still_running:
        outcome.status = "error"
        outcome.error = {
            "ename": "TimeoutError",
            "evalue": f"the code ran past its timeout of {timeout:g} s and did not stop when "
            "interrupted: it still runs in the kernel, and later runs wait for it (restart the "
            "interpreter to end it)",
            "traceback": [],
        }
    else:
        outcome.status = run_status(content.get("status"))
        outcome.execution_count = content.get("execution_count", outcome.execution_count)
        if outcome.status == "error" and outcome.error is None:
            outcome.error = _exception(content)
    outcome.queued = (outcome.began or time.monotonic()) - sent
    outcome.duration = time.monotonic() - sent
    return outcome


def interrupt(client: PinnedKernelClient) -> None:
    """Ask the kernel to interrupt the code it runs (as a frontend's interrupt button does).

    Only ever sent while this client's own code runs. The code may end just as the request
    travels, and the kernel then interrupts whatever it started next: a window of one
    message's transit, which the protocol gives no way to close."""
    with contextlib.suppress(Exception):  # a kernel gone already has nothing to interrupt
        client.control_channel.send(client.session.msg("interrupt_request", {}))


async def _stop_for_nobody(
    client: PinnedKernelClient,
    idle: asyncio.Future[None],
    began: asyncio.Event,
    still_running: Callable[[], Awaitable[str | None]],
) -> None:
    """Interrupt the code nobody waits for any more, once it runs: a request still queued
    cannot be withdrawn, so this waits for it to start (or end: a queued request can be
    aborted) rather than interrupt the code ahead of it, which is someone else's. ``idle`` is
    the request's reader (_published_until_idle), which sets ``began``; it is cancelled once
    this is done. Then waits for the kernel's interrupt_reply: the client's sockets close
    without lingering, and an interrupt still in their queue would be lost."""
    try:
        with contextlib.suppress(Exception):
            while not began.is_set():
                if (await asyncio.wait({idle}, timeout=WATCH_SECONDS))[0]:
                    return  # done (or aborted) before it began, or its reader failed
                if await still_running() is not None:
                    return
            if _ended(idle):
                return  # it ended as it began: an interrupt would hit the next code
            interrupt(client)
            async for answer in received(client.control_channel, INTERRUPT_GRACE):
                if answer["msg_type"] == "interrupt_reply":
                    return
    finally:
        idle.cancel()
        await asyncio.gather(idle, return_exceptions=True)


def _ended(idle: asyncio.Future[None]) -> bool:
    """Whether the request's reader saw its idle status (not failed, not cancelled)."""
    return idle.done() and not idle.cancelled() and idle.exception() is None


def _dropped_notice(count: int) -> str:
    """What a run whose kernel sent it messages the server would not read is told."""
    return (
        f"\n[jupyter-sandbox] the kernel sent this run {count} message(s) the server does not "
        f"read (a header past its bound, or more than {format_size(MAX_CONTENT_BYTES)} of "
        "content); they were dropped. Write large results to a file in the sandbox and read it "
        "through the files API instead.\n"
    )


@dataclass
class _Lost:
    """How many of a request's messages were dropped unread."""

    count: int = 0


async def _next(channel: RequestChannel, msg_id: str, lost: _Lost) -> dict[str, Any]:
    """The next message of request ``msg_id`` on ``channel`` (kernel_messages.py reads it); one
    dropped unread is counted in ``lost``, and comes with an empty content."""
    msg = await next_for(channel, msg_id, content_bytes=MAX_CONTENT_BYTES)
    if msg["dropped"] is not None:
        log.debug("dropped a message of a code run: %s", msg["dropped"])
        lost.count += 1
    return msg


async def _reply(client: PinnedKernelClient, msg_id: str, lost: _Lost) -> dict[str, Any]:
    while True:
        msg = await _next(client.shell_channel, msg_id, lost)
        if msg["msg_type"] == "execute_reply":  # one dropped still ends the run (an error)
            return dict(msg["content"])


async def _published_until_idle(
    client: PinnedKernelClient,
    msg_id: str,
    output: Output,
    outcome: KernelOutcome,
    began: asyncio.Event,
    lost: _Lost,
) -> None:
    while True:
        # Only this request's messages: another client's, or the kernel's own status, are
        # skipped before their content is decoded.
        msg = await _next(client.iopub_channel, msg_id, lost)
        if msg["dropped"] is not None:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "status" and content.get("execution_state") == "idle":
            return
        if kind == "stream":
            name = "stderr" if content.get("name") == "stderr" else "stdout"
            output(name, {"text": content.get("text", "")})
        elif kind in DISPLAY_TYPES:
            output(
                "display",
                {
                    "type": kind,
                    "data": content.get("data", {}),
                    "metadata": content.get("metadata", {}),
                    "transient": content.get("transient", {}),
                },
            )
        elif kind == "clear_output":
            output("clear", {"wait": bool(content.get("wait", False))})
        elif kind == "execute_input":  # the code starts now: its timeout counts from here
            outcome.execution_count = content.get("execution_count")
            outcome.began = time.monotonic()
            began.set()
        elif kind == "error":
            outcome.error = _exception(content)


def _exception(content: dict[str, Any]) -> dict[str, Any]:
    # The sandbox writes these: a traceback that is one long string, not a list of lines,
    # would become a list of one-character strings (tens of bytes each on the host).
    lines = content.get("traceback", [])
    return {
        "ename": str(content.get("ename", "")),
        "evalue": str(content.get("evalue", "")),
        "traceback": plain_traceback(
            [str(line) for line in lines] if isinstance(lines, list) else []
        ),
    }


def _until(deadline: float | None) -> float:
    if deadline is None:
        return WATCH_SECONDS
    return max(0.0, min(WATCH_SECONDS, deadline - time.monotonic()))
