"""One execute_request to a sandbox's kernel, from the host, and everything it publishes.

The Jupyter protocol as a frontend speaks it, reduced to what a caller without a frontend
wants (code_runs.py): the code's output as events, in order, and the reply. An execution is
done when both its ``execute_reply`` (shell) and its ``status: idle`` (iopub) have arrived:
ipykernel publishes idle after the last of the code's output, so nothing is missed, whatever
order the two sockets deliver in. Only messages whose parent is this request count: the
kernel may be serving a notebook at the same time, whose output is none of this caller's.

Past ``timeout`` the kernel is sent an ``interrupt_request`` on control (ipykernel raises
KeyboardInterrupt in the code, the reply says so) and given INTERRUPT_GRACE seconds more; code
that ignores the interrupt (stuck in C) is left running and reported as such. A caller that
goes away (cancels) interrupts the code too, so nothing keeps running for nobody.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .socket_pin import PinnedKernelClient

log = logging.getLogger(__name__)

INTERRUPT_GRACE = 5.0  # seconds the kernel has to stop the code once interrupted
WATCH_SECONDS = 0.5  # how often the sandbox is looked at while its kernel runs the code
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

    status: str = "ok"
    execution_count: int | None = None
    error: dict[str, Any] | None = None
    timed_out: bool = False
    still_running: bool = False
    duration: float = 0.0


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
) -> KernelOutcome:
    """Run ``code`` on ``client``'s kernel (shell, iopub and control started, iopub joined:
    kernel_link.ready_client), passing what it publishes to ``output`` as it comes.

    ``still_running`` is awaited every WATCH_SECONDS: None while the kernel can still answer,
    or why not (the sandbox stopped, the kernel was restarted), which ends the wait with
    ``on_reason(why)`` raised. Standard input is refused (``input()`` raises), and an error
    does not abort requests other callers have queued (``stop_on_error`` false).
    """
    started = time.monotonic()
    msg_id = client.execute(
        code, silent=False, store_history=True, allow_stdin=False, stop_on_error=False
    )
    outcome = KernelOutcome()
    idle = asyncio.ensure_future(_published_until_idle(client, msg_id, output, outcome))
    reply = asyncio.ensure_future(_reply(client, msg_id))
    both = asyncio.gather(idle, reply)
    deadline = started + timeout
    content: dict[str, Any] = {}
    finished = False
    try:
        while True:
            done, _ = await asyncio.wait({both}, timeout=_until(deadline))
            if done:
                content = both.result()[1]
                finished = True
                break
            if time.monotonic() >= deadline:
                if outcome.timed_out:  # interrupted, and it did not stop within the grace
                    outcome.still_running = True
                    finished = True  # nothing more to interrupt: it ignores interrupts
                    log.warning("code run in kernel did not stop when interrupted")
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
        both.cancel()
        await asyncio.gather(both, return_exceptions=True)
        if not finished:  # the caller went away: the code is not left running for nobody
            interrupt(client)
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
        outcome.status = str(content.get("status", "error"))
        outcome.execution_count = content.get("execution_count", outcome.execution_count)
        if outcome.status == "error" and outcome.error is None:
            outcome.error = _exception(content)
    outcome.duration = time.monotonic() - started
    return outcome


def interrupt(client: PinnedKernelClient) -> None:
    """Ask the kernel to interrupt the code it runs (as a frontend's interrupt button does)."""
    with contextlib.suppress(Exception):  # a kernel gone already has nothing to interrupt
        client.control_channel.send(client.session.msg("interrupt_request", {}))


async def _reply(client: PinnedKernelClient, msg_id: str) -> dict[str, Any]:
    while True:
        msg = await client.shell_channel.get_msg(timeout=None)
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "execute_reply":
            return dict(msg["content"])


async def _published_until_idle(
    client: PinnedKernelClient, msg_id: str, output: Output, outcome: KernelOutcome
) -> None:
    while True:
        msg = await client.iopub_channel.get_msg(timeout=None)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue  # another client's request, or the kernel's own status
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
        elif kind == "execute_input":
            outcome.execution_count = content.get("execution_count")
        elif kind == "error":
            outcome.error = _exception(content)


def _exception(content: dict[str, Any]) -> dict[str, Any]:
    return {
        "ename": str(content.get("ename", "")),
        "evalue": str(content.get("evalue", "")),
        "traceback": plain_traceback(list(content.get("traceback", []))),
    }


def _until(deadline: float) -> float:
    return max(0.0, min(WATCH_SECONDS, deadline - time.monotonic()))
