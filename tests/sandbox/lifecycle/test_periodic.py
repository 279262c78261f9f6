"""Housekeeping loops outlive their failures and end only when cancelled."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest

from jupyter_sandbox.protocol.errors import SandboxError
from jupyter_sandbox.sandbox.lifecycle.periodic import repeat

log = logging.getLogger("test_periodic")


async def test_failures_are_logged_and_the_next_pass_still_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failures = [SandboxError("the engine is down"), RuntimeError("a bug")]
    passes = 0
    third = asyncio.Event()

    async def step() -> None:
        nonlocal passes
        passes += 1
        if failures:
            raise failures.pop(0)
        third.set()

    with caplog.at_level(logging.WARNING, logger=log.name):
        task = asyncio.create_task(repeat(step, lambda: 0.0, "test pass", log))
        await asyncio.wait_for(third.wait(), timeout=5)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    assert passes >= 3
    warning, error = caplog.records[:2]
    assert (warning.levelno, warning.getMessage()) == (
        logging.WARNING,
        "test pass: the engine is down",
    )
    assert error.levelno == logging.ERROR
    assert error.getMessage() == "test pass failed"
    assert error.exc_info is not None  # a bug keeps its traceback
    assert task.cancelled()


async def test_the_interval_is_read_anew_before_each_sleep() -> None:
    asked = 0
    twice = asyncio.Event()

    def interval() -> float:
        nonlocal asked
        asked += 1
        if asked == 2:
            twice.set()
        return 0.0

    async def step() -> None:
        pass

    task = asyncio.create_task(repeat(step, interval, "test pass", log))
    await asyncio.wait_for(twice.wait(), timeout=5)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert asked >= 2


async def test_wake_restarts_the_sleep_and_runs_no_pass_by_itself() -> None:
    passes = 0
    second = asyncio.Event()
    sleep = 3600.0
    wake = asyncio.Event()

    async def step() -> None:
        nonlocal passes
        passes += 1
        if passes == 2:
            second.set()

    task = asyncio.create_task(repeat(step, lambda: sleep, "test pass", log, wake))
    try:
        for _ in range(20):  # woken often, the interval still an hour: no pass
            await asyncio.sleep(0.01)
            wake.set()
        await asyncio.sleep(0.1)
        assert passes == 1
        sleep = 0.2  # the next pass is due sooner: say so
        wake.set()
        await asyncio.wait_for(second.wait(), timeout=5)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
