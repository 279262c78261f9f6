"""What the server does in a sandbox counts as its activity, for the idle culler.

The proxy kernel records a sandbox's activity as cells run (kernel/activity.py). A sandbox used
only through the REST API (commands, files, terminals) has no kernel: without this, an agent
driving it with commands for an hour would find it culled as idle in the middle of its work.

So the manager records ``last_activity`` in the sandbox's state file when such an operation
begins and when it ends, and keeps count of those still running, which the culler (in the same
server process) asks before calling a sandbox idle: a command running for longer than the idle
timeout keeps its sandbox. Deadlines (a sandbox's own timeout, the TTL) still apply, as they do
to a running cell. The count lives in this process alone; another server's operations reach the
culler through ``last_activity`` only.
"""

from __future__ import annotations

import collections
import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

from .container_spec import now_iso

log = logging.getLogger(__name__)


class SandboxUsage:
    """Operations running in each sandbox now, and their record in the state file."""

    def __init__(self, update_state: Callable[..., Any]) -> None:
        """``update_state(sandbox_id, **changes)`` merges changes into a sandbox's state file
        (SandboxManager.update_state)."""
        self._update_state = update_state
        self._running: collections.Counter[str] = collections.Counter()

    def record(self, sandbox_id: str) -> None:
        """Note that the sandbox was used now (``last_activity``)."""
        try:
            self._update_state(sandbox_id, last_activity=now_iso())
        except OSError as exc:  # removed meanwhile: nothing is left to keep alive
            log.debug("no activity recorded for sandbox %s: %s", sandbox_id, exc)

    @contextlib.contextmanager
    def using(self, sandbox_id: str) -> Iterator[None]:
        """Count the sandbox as in use while the block runs, and record its activity at the
        beginning and at the end."""
        self.record(sandbox_id)
        self._running[sandbox_id] += 1
        try:
            yield
        finally:
            self._running[sandbox_id] -= 1
            if not self._running[sandbox_id]:
                del self._running[sandbox_id]
            self.record(sandbox_id)

    def in_use(self, sandbox_id: str) -> bool:
        """Whether an operation of this process runs in the sandbox now."""
        return self._running[sandbox_id] > 0
