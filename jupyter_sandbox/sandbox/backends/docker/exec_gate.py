"""Keeping pauses and removals away from the execs that are starting in the same container.

An exec whose runtime process joins the container's cgroup after the freezer froze it never
starts: ``runc init`` waits in the frozen cgroup, uninterruptibly, and the engine holds the
container while it waits. Inspect, unpause and remove of that container then hang, each until
its time limit, for as long as nobody thaws the cgroup by hand; the sandbox cannot even be
removed. Docker checks for a paused container when an exec starts, not after, so a pause that
lands while an exec starts wedges the container (tried with a detached exec and a pause issued
at once: every time, on runc). A sandbox is paused right after it starts (its network forwarder
is started beside the caller) and while a panel's stats probe runs, so this is not rare.

A removal that lands while execs start fares no better under runsc: the engine's kill of a
sandbox with commands attached, removed while more execs were being started into it, waited
far past its own limit or was refused ("PID … is zombie"), where it is quick once those starts
are done (docs/explanation/performance.md, "Figures behind the code"). In the test of one owner
flooding a server (tests/security/rest/test_denial_of_service.py) the removal hung until the
clients of the flood left.

So a pause or a removal, and the start of every exec, pass through :class:`ExecGate`: in this
process no exec is created while a pause or removal of its container is on its way, and the
pause or removal waits until the execs that are starting have started. Execs started by other
processes (a CLI beside the server), and this process's own once the engine has answered their
start (which it does before the runtime has started their process), are seen through the
engine: before it pauses or removes, :func:`wait_for_exec_processes` waits until every exec of
the container has a process or has ended.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import docker.errors

log = logging.getLogger(__name__)

# Seconds a pause or removal waits for execs that are starting: a start takes well under one;
# one that takes longer (an exec created and never started, by a process that died) is not
# waited for.
HALT_WAIT = 5.0
POLL_INTERVAL = 0.01  # seconds between the engine's answers about a starting exec


class ExecGate:
    """Per container: execs being created and started, and pauses and removals on their way.

    Blocking (threads of the engine's executors hold it); one per :class:`DockerEngine`.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._starting: Counter[str] = Counter()
        self._halting: Counter[str] = Counter()
        self._mine = threading.local()  # per thread: containers it is starting execs in

    @contextlib.contextmanager
    def starting(self, container: str, wait: float) -> Iterator[None]:
        """Around an exec's create and start: waits up to ``wait`` seconds for a pause or
        removal of ``container`` on its way (the engine then refuses the exec as paused, or
        finds no such container: clear errors).

        A start made of several execs holds this around all of them, so that no pause lands
        between them: a supervised command under gVisor, whose supervisor waits for a second
        exec to place it (exec_deadline.place_supervisor). Its inner starts, in the same
        thread, pass without waiting: a pause on its way waits for the outer one to end."""
        mine: Counter[str] = self._mine.__dict__.setdefault("starting", Counter())
        if mine[container]:
            mine[container] += 1
            try:
                yield
            finally:
                mine[container] -= 1
            return
        with self._changed:
            if not self._changed.wait_for(lambda: not self._halting[container], wait):
                log.warning(
                    "an exec in %s starts while a pause or removal of it is on its way", container
                )
            self._starting[container] += 1
        mine[container] += 1
        try:
            yield
        finally:
            mine[container] -= 1
            if not mine[container]:
                del mine[container]
            self._leave(self._starting, container)

    @contextlib.contextmanager
    def halting(self, container: str, wait: float = HALT_WAIT) -> Iterator[None]:
        """Around a pause or a removal: no exec of ``container`` is created until it is done,
        and it begins once those being started have been (waiting at most ``wait`` seconds)."""
        with self._changed:
            self._halting[container] += 1
            if not self._changed.wait_for(lambda: not self._starting[container], wait):
                log.warning("halting %s while an exec is still being started in it", container)
        try:
            yield
        finally:
            self._leave(self._halting, container)

    def _leave(self, counts: Counter[str], container: str) -> None:
        """One start, pause or removal of ``container`` is done: count it out and wake the waiters."""
        with self._changed:
            counts[container] -= 1
            if not counts[container]:
                del counts[container]
            self._changed.notify_all()


def wait_for_exec_processes(api: Any, container: str, wait: float = HALT_WAIT) -> None:
    """Blocking: wait up to ``wait`` seconds until every exec of ``container`` has a process or
    has ended, whoever made it: one with neither a pid nor an exit code (``exec_inspect``) is
    still on its way."""
    deadline = time.monotonic() + wait
    pending = list(api.inspect_container(container).get("ExecIDs") or [])
    while pending:
        still = []
        for exec_id in pending:
            try:
                found = api.exec_inspect(exec_id)
            except docker.errors.NotFound:  # ended and forgotten by the engine
                continue
            # Created and not yet started, or being started: the engine marks an exec running
            # before the runtime has started its process, and gives it a pid after.
            if not found.get("Pid") and found.get("ExitCode") is None:
                still.append(exec_id)
        if not still or time.monotonic() >= deadline:
            return
        pending = still
        time.sleep(POLL_INTERVAL)
