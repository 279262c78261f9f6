"""The proxy kernel's loop: uvloop's when installed (it is a dependency), asyncio's otherwise."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from jupyter_sandbox.kernel import event_loop


async def _loop_type() -> type:
    await asyncio.sleep(0)
    return type(asyncio.get_running_loop())


def test_runs_on_uvloop_when_installed() -> None:
    assert event_loop.run(_loop_type()) is uvloop.Loop


def test_falls_back_to_asyncio_without_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(event_loop, "UVLOOP_RUN", None)
    loop_type = event_loop.run(_loop_type())
    assert loop_type is not uvloop.Loop
    assert issubclass(loop_type, asyncio.BaseEventLoop)


def test_returns_the_result_and_raises_the_error() -> None:
    async def fail() -> None:
        raise ValueError("from the coroutine")

    assert event_loop.run(asyncio.sleep(0, result=42)) == 42
    with pytest.raises(ValueError, match="from the coroutine"):
        event_loop.run(fail())
