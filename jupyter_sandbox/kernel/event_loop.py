"""The proxy kernel's event loop: uvloop's where it is installed, asyncio's otherwise.

Every message the proxy relays costs it at least one event-loop wake-up (reactor.py), and on the
round trip of a small cell those wake-ups lie on the critical path. uvloop's loop (C, over
libuv) turns a wake-up around faster than asyncio's selector loop: under runc the proxy adds
less to a round trip with it; under runsc the run-to-run spread hides the difference
(``benchmarks/relay.py``; figures: docs/explanation/performance.md, "Figures behind the code").

The proxy relies on nothing uvloop lacks (readers on file descriptors, timers,
call_soon_threadsafe, executors). Where uvloop cannot be imported (Windows, or an install
without it) asyncio's own loop runs the same code.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
Runner = Callable[[Coroutine[Any, Any, T]], T]


def _uvloop_run() -> Runner[Any] | None:
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.run


# Imported with this module, so the zygote's preloading covers it before any fork.
UVLOOP_RUN = _uvloop_run()


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``, on uvloop's loop when it is installed."""
    if UVLOOP_RUN is None:
        return asyncio.run(main)
    result: T = UVLOOP_RUN(main)
    return result
