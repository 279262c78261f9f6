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

An operation's records are written at most once a RECORD_INTERVAL per sandbox: writing the
state file (locked, merged, replaced) twice per operation was a fifth of a quick code run's
whole time, and an agent runs many in a row (figures: docs/explanation/performance.md,
"Figures behind the code"). ``last_activity`` is then at most that
interval older than the truth, which is nothing to an idle timeout counted in minutes.

What is kept of a sandbox goes when it is removed (:meth:`SandboxUsage.forget`), or a
long-running server would keep an entry for every sandbox it ever used: removed by this process
(SandboxManager.remove, the reaper) at once; by another one (an ephemeral kernel's sandbox at
its shutdown, the CLI) when the culler's next pass finds it gone (``forget_all_but``).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import time
from collections.abc import Callable, Collection, Iterator
from typing import Any

from jupyter_sandbox.sandbox.host.clock import now_iso

log = logging.getLogger(__name__)

RECORD_INTERVAL = 1.0  # seconds: an operation's activity is written at most this often a sandbox


class SandboxUsage:
    """Operations running in each sandbox now, and their record in the state file."""

    def __init__(self, update_state: Callable[..., Any], interval: float = RECORD_INTERVAL) -> None:
        """``update_state(sandbox_id, **changes)`` merges changes into a sandbox's state file
        (SandboxManager.update_state); ``interval``: seconds between two records of
        operations (:meth:`using`) in one sandbox, at least."""
        self._update_state = update_state
        self.interval = interval
        self._running: collections.Counter[str] = collections.Counter()
        self._written: dict[str, float] = {}  # sandbox id -> time.monotonic() of its record

    def record(self, sandbox_id: str) -> None:
        """Note that the sandbox was used now (``last_activity``), whenever it was last noted
        (callers that are called often, such as a terminal's, keep their own pace)."""
        try:
            self._update_state(sandbox_id, last_activity=now_iso())
        except OSError as exc:  # removed meanwhile: nothing is left to keep alive
            log.debug("no activity recorded for sandbox %s: %s", sandbox_id, exc)
            self._written.pop(sandbox_id, None)
            return
        self._written[sandbox_id] = time.monotonic()

    @contextlib.contextmanager
    def using(self, sandbox_id: str) -> Iterator[None]:
        """Count the sandbox as in use while the block runs, and record its activity at the
        beginning and at the end (each unless recorded less than ``interval`` ago)."""
        self._record_unless_recent(sandbox_id)
        self._running[sandbox_id] += 1
        try:
            yield
        finally:
            self._running[sandbox_id] -= 1
            if not self._running[sandbox_id]:
                del self._running[sandbox_id]
            self._record_unless_recent(sandbox_id)

    def _record_unless_recent(self, sandbox_id: str) -> None:
        written = self._written.get(sandbox_id)
        if written is None or time.monotonic() - written >= self.interval:
            self.record(sandbox_id)

    def in_use(self, sandbox_id: str) -> bool:
        """Whether an operation of this process runs in the sandbox now."""
        return self._running[sandbox_id] > 0

    def forget(self, sandbox_id: str) -> None:
        """Drop what is kept of a removed sandbox. An operation still running in it keeps its
        count, which it takes down (and drops) as it ends: in_use stays true until then."""
        self._written.pop(sandbox_id, None)
        if not self._running.get(sandbox_id):
            self._running.pop(sandbox_id, None)

    def forget_all_but(self, sandbox_ids: Collection[str]) -> None:
        """:meth:`forget` every sandbox but ``sandbox_ids`` (those that exist): the ones that
        other processes removed."""
        for sandbox_id in self.tracked() - set(sandbox_ids):
            self.forget(sandbox_id)

    def tracked(self) -> set[str]:
        """The sandboxes of which something is kept."""
        return set(self._written) | set(self._running)
