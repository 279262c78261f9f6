"""A cap on the output one cell sends to frontends (checklist row 10: output floods).

Sandboxed code can print gigabytes in a loop. Relayed as it is, that output fills the browser's
memory, the server's websocket buffers and, once saved, the notebook file. The proxy therefore
counts the output bytes of each cell (stream text, display data, results) as they pass, cuts the
message that crosses ``SandboxSettings.max_cell_output``, drops the cell's later output and tells
the frontend once, on stderr, what happened and what to do instead. The cell itself runs on:
only what reaches the frontends is capped. Errors (tracebacks) and status messages always pass.

Counting uses the raw size of each message's content frame, so messages that are not output are
never decoded beyond the header check the relay already makes.
"""

from __future__ import annotations

import json

from ..sandbox.limits import format_size
from .wire import WireMessage, as_bytes

# Output message types, as their names appear in a raw header (see WireMessage.header_mentions).
OUTPUT_TYPES = ("stream", "display_data", "update_display_data", "execute_result")
_MENTIONS = tuple(f'"{name}"'.encode() for name in OUTPUT_TYPES)


class OutputCap:
    """Per-cell output budgets, keyed by the execute_request's msg_id.

    The proxy calls :meth:`admit` for every iopub message bound for frontends and
    :meth:`forget` when the cell's execute_reply passes.
    """

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self._used: dict[str, int] = {}

    def admit(self, message: WireMessage) -> tuple[WireMessage | None, str | None]:
        """The message to relay (possibly cut short, or None to drop it) and the notice to send
        in its place when the message that crossed the budget had to be dropped whole (a cut
        stream message carries the notice at the end of its text)."""
        if self.limit_bytes <= 0 or not any(message.header_mentions(m) for m in _MENTIONS):
            return message, None
        if message.msg_type not in OUTPUT_TYPES:
            return message, None
        cell = message.parent_msg_id()
        used = self._used.get(cell, 0)
        if used > self.limit_bytes:
            return None, None  # already over: the notice went out with the message that crossed
        size = len(message.content)  # a zmq.Frame's length: no copy on the relay's path
        self._used[cell] = used + size
        if used + size <= self.limit_bytes:
            return message, None
        self._used[cell] = self.limit_bytes + 1
        if message.msg_type != "stream":
            return None, self.notice()  # half an image is no image
        return self._cut(message, self.limit_bytes - used, self.notice()), None

    def forget(self, cell: str) -> None:
        self._used.pop(cell, None)

    def notice(self) -> str:
        return (
            f"\n[jupyter-sandbox] this cell's output passed {format_size(self.limit_bytes)}; the "
            "rest is not shown (the cell keeps running). Write large results to a file in "
            "/workspace instead, or raise c.SandboxSettings.max_cell_output.\n"
        )

    @staticmethod
    def _cut(message: WireMessage, room: int, notice: str) -> WireMessage:
        """The stream message with its text cut to ``room`` bytes and the notice after it."""
        content = json.loads(as_bytes(message.content))
        text = str(content.get("text", "")).encode()[: max(room, 0)].decode(errors="ignore")
        message.content = json.dumps({**content, "text": text + notice}).encode()
        return message
