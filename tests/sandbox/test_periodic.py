"""Housekeeping loops outlive their failures and end only when cancelled."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest

from jupyter_sandbox.sandbox.errors import SandboxError
from jupyter_sandbox.sandbox.periodic import repeat

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
