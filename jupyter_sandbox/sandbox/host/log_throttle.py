"""Warnings a sandbox can cause at will, logged so that it cannot fill the host's log with them.

A kernel in a sandbox decides how many malformed, badly signed or oversized messages it sends,
and how often a connection of the host's has to be cut: one warning line each would let it write
the host's log as fast as it can send (ZMQ reconnects within milliseconds). A
:class:`ThrottledWarning` says the first of each reason at WARNING, and afterwards at most one
line per ``interval`` for that reason, counting those it did not say; the others go to DEBUG.
Reasons are the caller's own constants, never text the sandbox wrote, so their number is bounded.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

DEFAULT_INTERVAL = 60.0  # seconds between two lines of one reason


@dataclass
class _Said:
    last: float  # when a line of this reason was last logged at WARNING (time.monotonic())
    unsaid: int = 0  # how many came since, logged at DEBUG only


class ThrottledWarning:
    """A logger's warnings of a few fixed reasons, each said at most once per ``interval``."""

    def __init__(self, logger: logging.Logger, interval: float = DEFAULT_INTERVAL) -> None:
        self._log, self.interval = logger, interval
        self._said: dict[str, _Said] = {}

    def warning(self, reason: str, message: str, *args: object) -> None:
        """Log ``message % args`` at WARNING if ``reason`` was not said within the interval
        (with the count of those left unsaid since), else at DEBUG."""
        now = time.monotonic()
        said = self._said.get(reason)
        if said is not None and now - said.last < self.interval:
            said.unsaid += 1
            self._log.debug(message, *args)
            return
        if said is not None and said.unsaid:
            self._log.warning(
                message + " (and %d more like it since the last said)", *args, said.unsaid
            )
        else:
            self._log.warning(message, *args)
        self._said[reason] = _Said(last=now)
