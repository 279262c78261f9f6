"""busy and last_activity in the sandbox's state file, which the idle culler reads."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_sandbox.kernel import activity
from jupyter_sandbox.kernel.activity import ActivityRecord
from tests.kernel.kernels import run, running_kernel
from tests.kernel.sandbox_env import containers_under, notebook_dir, sandbox_kernel_env


@pytest.fixture
def env(purpose: str) -> Iterator[Path]:
    with sandbox_kernel_env(purpose) as state_dir:
        yield state_dir


def read_state(state_dir: Path) -> dict[str, Any]:
    (container,) = containers_under(state_dir)
    path = state_dir / container.labels["io.jupyter-sandbox.sandbox"] / "state.json"
    state: dict[str, Any] = json.loads(path.read_text())
    return state


def wait_for(state_dir: Path, check: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    deadline = time.monotonic() + 3
    while True:
        state = read_state(state_dir)
        if check(state) or time.monotonic() > deadline:
            return state
        time.sleep(0.05)


@pytest.mark.integration
def test_busy_while_a_long_cell_runs_and_idle_after(env: Path, runtime: str) -> None:
    with running_kernel(notebook_dir(env), JUPYTER_SANDBOX_RUNTIME=runtime) as (km, kc):
        run(kc, "1")
        idle = wait_for(env, lambda s: s.get("busy") is False)
        assert idle["busy"] is False
        assert idle["kernel_pid"] == km.provisioner.pid  # type: ignore[union-attr]

        msg_id = kc.execute("import time; time.sleep(5)")
        busy = wait_for(env, lambda s: s.get("busy") is True)
        assert busy["busy"] is True
        assert busy["last_activity"] >= idle["last_activity"]
        for _ in range(3):  # and it stays so while the cell runs
            time.sleep(1)
            assert read_state(env)["busy"] is True

        reply = kc.get_shell_msg(timeout=30)
        assert reply["parent_header"]["msg_id"] == msg_id
        after = wait_for(env, lambda s: s.get("busy") is False)
        assert after["busy"] is False
        assert after["last_activity"] > busy["last_activity"]


class FakeState:
    def __init__(self) -> None:
        self.writes: list[dict[str, Any]] = []

    def __call__(self, **changes: Any) -> None:
        self.writes.append(changes)


async def settle(seconds: float = 0.0) -> None:
    await asyncio.sleep(seconds)
    await asyncio.sleep(0)


async def test_busy_is_written_at_once_and_idle_once_it_settles() -> None:
    state = FakeState()
    record = ActivityRecord(state)
    await settle()
    assert [w["busy"] for w in state.writes] == [False]  # attaching: no cell is known to run

    record.set_busy(True)
    assert len(state.writes) == 1  # not while relaying the request: a callback writes it
    await settle()
    assert [w["busy"] for w in state.writes] == [False, True]

    record.set_busy(False)
    record.set_busy(True)  # the next cell follows at once: nothing to write
    await settle(activity.IDLE_SETTLE_SECONDS * 2)
    assert [w["busy"] for w in state.writes] == [False, True]

    record.set_busy(False)
    await settle(activity.IDLE_SETTLE_SECONDS / 4)
    assert [w["busy"] for w in state.writes] == [False, True]
    await settle(activity.IDLE_SETTLE_SECONDS * 2)
    assert [w["busy"] for w in state.writes] == [False, True, False]
    assert all("last_activity" in w for w in state.writes)


async def test_closing_writes_an_idle_spell_not_yet_written() -> None:
    state = FakeState()
    record = ActivityRecord(state)
    record.set_busy(True)
    await settle()
    record.set_busy(False)
    record.close()
    assert [w["busy"] for w in state.writes] == [True, False]
