"""``within``: await something for at most so many seconds, without losing a cancellation.

Why not ``asyncio.wait_for``: before Python 3.12 it swallows a cancellation of its caller that
arrives just as the awaited thing finishes (python/cpython#86296, fixed in 3.12 by rewriting
it over ``asyncio.timeout``). The caller then returns the result as if never cancelled, and
whoever cancelled it waits for it for ever. This project met exactly that: a Jupyter server
asked to shut down a moment after it started cancelled the culler while its first Docker call
was returning; the culler went back to sleep, and the server's shutdown waited for it until the
client gave up. ``asyncio.wait``, used here, never catches its caller's cancellation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def within(awaitable: Awaitable[T], seconds: float) -> T:
    """``await awaitable``, or cancel it and raise ``asyncio.TimeoutError`` after ``seconds``.

    As with ``asyncio.wait_for``, a timed-out awaitable has ended (cancelled) when this raises;
    a cancelled caller cancels the awaitable too and raises ``CancelledError``, always.
    """
    inner = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({inner}, timeout=max(seconds, 0))
    except BaseException:  # the caller was cancelled: the result is no longer wanted
        inner.cancel()
        raise
    if not done:
        inner.cancel()
        await asyncio.wait({inner})  # ended before the caller goes on, as with wait_for
        if inner.cancelled():
            raise asyncio.TimeoutError
    return inner.result()  # or its exception (also when it ended otherwise while cancelled)
