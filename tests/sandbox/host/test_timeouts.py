"""within(): wait_for's contract, and a caller's cancellation is never lost."""

from __future__ import annotations

import asyncio

import pytest

from jupyter_sandbox.sandbox.host.timeouts import within


async def test_returns_the_result_or_raises_the_error() -> None:
    assert await within(asyncio.sleep(0, result="done"), 5) == "done"

    async def fail() -> None:
        raise ValueError("from inside")

    with pytest.raises(ValueError, match="from inside"):
        await within(fail(), 5)


async def test_times_out_and_the_awaitable_has_ended_by_then() -> None:
    ended = asyncio.Event()

    async def slow() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            ended.set()

    with pytest.raises(asyncio.TimeoutError):
        await within(slow(), 0.05)
    assert ended.is_set()


async def test_a_cancelled_caller_cancels_the_awaitable() -> None:
    inner: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    caller = asyncio.ensure_future(within(inner, 60))
    await asyncio.sleep(0)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert inner.cancelled()


async def test_a_cancellation_arriving_as_the_awaitable_finishes_is_not_lost() -> None:
    # asyncio.wait_for before Python 3.12 returns 42 here, and the canceller waits for ever
    # (python/cpython#86296): the Jupyter server's shutdown hung on the culler that way.
    inner: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    caller = asyncio.ensure_future(within(inner, 60))
    await asyncio.sleep(0)  # the caller now waits for inner
    inner.set_result(42)  # its wake-up is scheduled ...
    caller.cancel()  # ... and the cancellation arrives before it runs
    with pytest.raises(asyncio.CancelledError):
        await caller
