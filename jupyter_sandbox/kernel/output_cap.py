"""A cap on the output one cell sends to frontends (checklist rows 10 and 47: output floods;
see docs/explanation/design.md).

Sandboxed code can print gigabytes in a loop. Relayed as it is, that output fills the browser's
memory, the server's websocket buffers and, once saved, the notebook file. The proxy therefore
counts the bytes of every iopub message the sandbox sends as they pass, cuts the message that
crosses ``SandboxSettings.max_cell_output``, drops the cell's later messages and tells the
frontend once, on stderr, what happened and what to do instead. The cell itself runs on: only
what reaches the frontends is capped.

Every message counts, not only output: an ``error`` (a 16 MB exception message), comm messages
(a widget's state and buffers), ``update_display_data``, ``clear_output`` reach the frontend as
surely as a print does, and each of their frames, header and metadata included, is the
sandbox's to fill. Nor is a message counted against the parent it names: that header is the
sandbox's to write, and naming a fresh msg_id each time would give each message a fresh budget.
Bytes count against the execution the proxy knows is running (the oldest execute_request it
relayed whose reply has not come back), and between executions against a budget of their own,
renewed as each execution ends: only a frontend's requests can renew a budget.

Past the cap, only ``status`` messages still pass (a frontend waits for its request's ``idle``),
small ones and a bounded number per budget, so that a flood of them is capped too.

Whatever the cap, and before it is reached: a message whose header, parent header or metadata
frame is past HEADER_BYTES, or a ``status`` past STATUS_BYTES, is dropped. ipykernel's come
nowhere near, and each is decoded whole on its way (Jupyter Server reads every status message's
content to limit the rate of output, the frontends every header): the sandbox must not make
that cost what it likes.

An execute_reply must reach the frontend too (it ends the cell), and ipykernel's carries the
exception's message and traceback again, on shell: one that does not fit in what is left of
its execution's budget (and is larger than REPLY_BYTES) is rebuilt small: its status, count,
the exception's name and the start of its message, the notice in place of its traceback.
"""

from __future__ import annotations

import json
import re
import uuid
from datetime import datetime, timezone
from typing import Any

from jupyter_sandbox.kernel.wire import HEADER_BYTES, MalformedMessage, WireMessage, as_bytes, loads
from jupyter_sandbox.sandbox.limits import format_size

# A status message passes if its frames hold at most STATUS_BYTES (ipykernel's are under 1 KiB,
# parent header included); past the cap, at most STATUS_PAST_CAP of them per budget: a
# frontend's own requests (completions, inspections, debugger steps) each want a busy and an idle.
STATUS_BYTES = 4096
STATUS_PAST_CAP = 256
# The budget of what the sandbox sends while no execution runs.
BETWEEN_EXECUTIONS = ""
# An execute_reply up to this size passes whatever is left of its execution's budget: a reply
# with a payload or user expressions after a cell that filled its budget is still whole.
REPLY_BYTES = 64 * 1024
EVALUE_CHARS = 1024  # of an oversized reply's exception message, kept
# The most of a content frame (the sandbox's bytes) decoded to rebuild a reply or cut a stream:
# a larger reply is rebuilt from nothing of its content, a larger crossing stream dropped whole.
DECODE_BYTES = 16 * 1024**2
# Header fields an oversized reply keeps, when they are short strings (the rest is rebuilt).
_HEADER_FIELDS = ("msg_id", "session", "username", "version")


class OutputCap:
    """Per-execution output budgets, keyed by the msg_id of the execute_request the proxy knows
    is running (BETWEEN_EXECUTIONS when none is).

    The proxy calls :meth:`admit` for every iopub message bound for frontends,
    :meth:`admit_reply` then :meth:`forget` for the execute_reply to a request it relayed, and
    :meth:`admits_other` for every other message bound for frontends.
    """

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self._used: dict[str, int] = {}
        self._status_past_cap: dict[str, int] = {}

    def admit(
        self, message: WireMessage, running: str | None
    ) -> tuple[WireMessage | None, str | None]:
        """The message to relay (possibly cut short, or None to drop it) and the notice to send
        in its place when the message that crossed the budget had to be dropped whole (a cut
        stream message carries the notice at the end of its text). ``running``: the msg_id
        of the execute_request the kernel runs now, or None between executions."""
        # Frames past the signature: header, parent header, metadata, content, buffers (a
        # zmq.Frame's length: no copy on the relay's path).
        size = sum(len(frame) for frame in message.frames[message.delim + 2 :])
        if _out_of_shape(message, size):
            return None, None
        if self.limit_bytes <= 0:
            return message, None
        budget = running or BETWEEN_EXECUTIONS
        used = self._used.get(budget, 0)
        if used > self.limit_bytes:
            # Already over: the notice went out with the message that crossed.
            return (message if self._status_passes(message, budget, size) else None), None
        self._used[budget] = used + size
        if used + size <= self.limit_bytes:
            return message, None
        self._used[budget] = self.limit_bytes + 1
        if self._status_passes(message, budget, size):
            return message, self.notice()
        # The text is cut to the room left once the message's other frames are counted.
        room = self.limit_bytes - used - (size - len(message.content))
        cut = self._cut(message, room, self.notice())
        return (cut, None) if cut is not None else (None, self.notice())

    def admit_reply(self, reply: WireMessage, request: WireMessage) -> WireMessage:
        """The execute_reply to ``request`` to relay: as it came, or rebuilt small if it does
        not fit in what is left of its execution's budget (see the module's docstring). Its
        parent header becomes the request's own: the frontend matches the reply by it."""
        if self.limit_bytes <= 0:
            return reply
        size = sum(len(frame) for frame in reply.frames[reply.delim + 2 :])
        room = self.limit_bytes - self._used.get(request.msg_id, 0)
        if size <= max(room, REPLY_BYTES):
            return reply
        content = _content(reply)
        small: dict[str, Any] = {
            "status": str(content.get("status", "error"))[:16],
            "execution_count": _count(content.get("execution_count")),
        }
        if small["status"] == "error":
            ename = content.get("ename") if content else _ename_of_undecoded(reply)
            small.update(
                ename=str(ename or "")[:EVALUE_CHARS],
                evalue=str(content.get("evalue", ""))[:EVALUE_CHARS],
                traceback=[self.notice()],
            )
        header = reply.header_dict
        fresh = {k: header[k] for k in _HEADER_FIELDS if _short(header.get(k))}
        fresh.setdefault("msg_id", uuid.uuid4().hex)
        fresh.update(msg_type="execute_reply", date=datetime.now(timezone.utc).isoformat())
        signed = [fresh, request.header_dict, {}, small]
        reply.frames[reply.delim + 2 :] = [json.dumps(part).encode() for part in signed]
        return reply

    def admits_other(self, message: WireMessage) -> bool:
        """Whether a message bound for frontends on shell, control or stdin, other than an
        execute_reply, passes: one larger than the whole cap does not. Jupyter's replies to a
        frontend's requests (completions, inspections, history, the debugger's) are far smaller;
        the sandbox writes them, whether asked or not, and nothing else bounds them on their way
        to the server and the browser."""
        if self.limit_bytes <= 0:
            return True
        return sum(len(frame) for frame in message.frames) <= self.limit_bytes

    def forget(self, cell: str) -> None:
        """The execution ``cell`` ended: drop its budget, and renew the one between executions."""
        for budget in (cell, BETWEEN_EXECUTIONS):
            self._used.pop(budget, None)
            self._status_past_cap.pop(budget, None)

    def notice(self) -> str:
        return (
            f"\n[jupyter-sandbox] this cell's output passed {format_size(self.limit_bytes)}; the "
            "rest is not shown (the cell keeps running). Write large results to a file in "
            "/workspace instead, or raise c.SandboxSettings.max_cell_output.\n"
        )

    def _status_passes(self, message: WireMessage, budget: str, size: int) -> bool:
        """Whether a message past the cap passes: a small status, while this budget has let
        fewer than STATUS_PAST_CAP of them through."""
        if size > STATUS_BYTES or not _is_status(message):
            return False
        passed = self._status_past_cap.get(budget, 0)
        if passed >= STATUS_PAST_CAP:
            return False
        self._status_past_cap[budget] = passed + 1
        return True

    @staticmethod
    def _cut(message: WireMessage, room: int, notice: str) -> WireMessage | None:
        """A stream message with its text cut to ``room`` bytes and the notice after it; None
        for any other message (half an image, an error or a comm's state is none), or when
        there is no room."""
        if room < 0 or message.msg_type != "stream":
            return None  # no room even for its header and metadata
        content = _content(message)
        if not content:
            return None
        text = str(content.get("text", "")).encode()[: max(room, 0)].decode(errors="ignore")
        message.content = json.dumps({**content, "text": text + notice}).encode()
        return message


def _is_status(message: WireMessage) -> bool:
    # The name's bytes first: most messages are output, and rule themselves out undecoded.
    return message.header_mentions(b'"status"') and message.msg_type == "status"


def _out_of_shape(message: WireMessage, size: int) -> bool:
    """Whether ``message`` (of ``size`` bytes past its signature) has a header, parent header
    or metadata frame past HEADER_BYTES, or is a status past STATUS_BYTES: no kernel's is."""
    header, parent, metadata = message.frames[message.delim + 2 : message.delim + 5]
    if max(len(header), len(parent), len(metadata)) > HEADER_BYTES:
        return True
    return size > STATUS_BYTES and _is_status(message)


def _content(message: WireMessage) -> dict[str, Any]:
    """The content the sandbox wrote in ``message``, if it is a JSON object the strict reader
    takes within DECODE_BYTES; {} otherwise (nested past the stack, NaN, too large...)."""
    try:
        content = loads(as_bytes(message.content), DECODE_BYTES)
    except MalformedMessage:
        return {}
    return content if isinstance(content, dict) else {}


# An exception's name in a content frame too large to decode: JSON escapes every quote inside a
# string, so ``"ename": "`` is found only as a key; a name is an identifier path, bounded.
_ENAME = re.compile(rb'"ename"\s*:\s*"([A-Za-z_][A-Za-z0-9_.]{0,200})"')


def _ename_of_undecoded(message: WireMessage) -> str:
    """The exception's name of an error reply whose content is past DECODE_BYTES (a huge
    message or traceback), so that the user still sees which exception it was; "" if none."""
    found = _ENAME.search(as_bytes(message.content))
    return found.group(1).decode("ascii") if found else ""


def _short(value: object) -> bool:
    return isinstance(value, str) and len(value) <= 128


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
