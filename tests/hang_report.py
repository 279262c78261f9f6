"""What a test that hangs was waiting for, in its failure report: a pytest plugin (loaded by
tests/conftest.py).

pytest-timeout fails a test that runs past its limit from a signal handler, so its report shows
only the main thread, and in an async test that thread is the event loop, idle in ``select``:
nothing of what it waits for. The test's other threads (a synchronous client run with
``asyncio.to_thread``, the engine's worker threads) and its suspended tasks (a server handler,
a follower, a wait for a slot) are where the answer is. So, shortly before the limit, a timer
thread writes down every thread's stack and every pending task's, and the report of a test that
then fails carries them as its first section.

The timer thread reads the tasks while the loop runs on: the loop of a hung test sleeps in
``select``, and a dump taken while it does something else is still what it was doing, give or
take a step. Nothing here changes what the test does.
"""

from __future__ import annotations

import asyncio
import gc
import io
import sys
import threading
import traceback
from collections.abc import Generator

import pytest

# The part of the test's time limit after which what it waits for is written down: late
# enough that no test that passes pays for it, early enough to finish before the limit.
AT_FRACTION = 0.9
# The innermost frames shown of each stack: where it waits, not how pytest got there.
FRAMES = 12
DUMPS = pytest.StashKey[list[str]]()


def _time_limit(item: pytest.Item) -> float | None:
    """The test's time limit as pytest-timeout has it: its marker's, else ``--timeout``'s,
    else the ini's (seconds; None or 0: none)."""
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    value = item.config.getoption("timeout", None) or item.config.getini("timeout")
    return float(value) if value else None


def what_waits() -> str:
    """Every thread's stack, then every pending task's, as text."""
    out = io.StringIO()
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        if ident == threading.get_ident():  # this timer's own
            continue
        out.write(f"--- thread {names.get(ident, '?')}\n")
        out.write("".join(traceback.format_stack(frame, limit=FRAMES)))
    # Tasks of every loop (a test may run one of its own); read from this thread, so the
    # collection may change under the loop: read again if it does.
    for _ in range(3):
        try:
            tasks = [o for o in gc.get_objects() if isinstance(o, asyncio.Task) and not o.done()]
            break
        except RuntimeError:
            continue
    else:
        tasks = []
    for task in tasks:
        out.write(f"--- task {task.get_name()}: {task.get_coro()!r}\n")
        with io.StringIO() as stack:
            task.print_stack(limit=FRAMES, file=stack)
            out.write(stack.getvalue())
    return out.getvalue()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    limit = _time_limit(item)
    if not limit:
        return (yield)
    dumps = item.stash.setdefault(DUMPS, [])
    timer = threading.Timer(limit * AT_FRACTION, lambda: dumps.append(what_waits()))
    timer.daemon = True
    timer.start()
    try:
        return (yield)
    finally:
        timer.cancel()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    dumps = item.stash.get(DUMPS, [])
    if report.failed and dumps:
        title = f"what the test waited for at {AT_FRACTION:.0%} of its time limit"
        report.sections.insert(0, (title, dumps[-1]))
    return report
