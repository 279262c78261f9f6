"""Whether the sandbox is running a cell, recorded in its state file for the idle culler.

Fields of the sandbox's state file that the proxy kernel keeps up to date:

``kernel_pid``
    The process id of the proxy kernel attached to the sandbox (written when it attaches).
``busy``
    ``true`` from the moment an execute_request is relayed to the sandbox until the last pending
    one has its execute_reply, however long the cell runs; ``false`` otherwise. Each proxy writes
    ``false`` when it attaches (it knows of no running cell). The proxy cannot clear it when it
    dies without warning (SIGKILL), so a culler must treat ``busy`` as stale, and the sandbox as
    idle since ``last_activity``, when the process ``kernel_pid`` no longer exists.
``last_activity``
    ISO 8601 UTC time at which ``busy`` was last written: a kernel attached, the sandbox went
    from idle to busy, or back to idle.

The writes stay off the relay's path: the proxy calls ``set_busy`` while relaying, and the file is
written by a callback after the message has gone on. Turning busy is written at once, as the
kernel starts on the cell; turning idle is written ``IDLE_SETTLE_SECONDS`` later and only if the
sandbox is still idle, so cells run back to back (a whole notebook) cost no writes between them.
A culler therefore sees ``busy`` up to that long after the last cell ended, never the reverse.
All writes happen on the event loop's thread, as every other state write of the proxy does, so
none of them can overwrite another's change with a stale copy of the file.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from jupyter_sandbox.sandbox.host.clock import now_iso

log = logging.getLogger(__name__)

IDLE_SETTLE_SECONDS = 0.2  # how long the sandbox must stay idle before busy=false is written


class ActivityRecord:
    """Keeps ``busy`` and ``last_activity`` in the state file in step with the running cells."""

    def __init__(self, write: Callable[..., Any]) -> None:
        """``write(**changes)`` merges changes into the state file (SandboxManager.update_state)."""
        self._write = write
        self._busy = False
        self._recorded: bool | None = None  # what the file says; None: not written by us yet
        self._loop = asyncio.get_running_loop()
        self._flush: asyncio.Handle | None = self._loop.call_soon(self._record)

    def set_busy(self, busy: bool) -> None:
        """Note whether any execute_request is pending; cheap, called while relaying."""
        if busy == self._busy:
            return
        self._busy = busy
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        if busy == self._recorded:
            return  # busy again before the idle spell was written: the file is right as it is
        if busy:
            self._flush = self._loop.call_soon(self._record)  # after the request has gone on
        else:
            self._flush = self._loop.call_later(IDLE_SETTLE_SECONDS, self._record)

    def _record(self) -> None:
        self._flush = None
        try:
            self._write(busy=self._busy, last_activity=now_iso())
        except OSError as exc:
            # The next change tries again; a culler meanwhile sees the previous state.
            log.warning("cannot record busy=%s in the state file: %s", self._busy, exc)
            return
        self._recorded = self._busy

    def close(self) -> None:
        """Write what is still to be written (an idle spell that began just before the end)."""
        if self._flush is not None:
            self._flush.cancel()
            self._record()
