"""Execs whose output the host does not want: never held, whatever the sandbox writes.

The engine, the sandbox and docker-py are the real ones. Each command writes 200 MB to its
standard output, which the host's memory must not follow (the sandbox chooses what an exec of
its user writes: a library its environment preloads, or a process writing into the exec's
descriptors).
"""

from __future__ import annotations

import asyncio

import pytest

from jupyter_sandbox.sandbox import labels
from jupyter_sandbox.sandbox.backends.docker.exec_start import run_unread
from jupyter_sandbox.sandbox.backends.docker.stream import MAX_UNSUNK_STDOUT
from jupyter_sandbox.sandbox.manager import SandboxManager
from tests.memory_growth import peak_growth

pytestmark = pytest.mark.integration

FLOOD = ["/bin/sh", "-c", "head -c 200000000 /dev/zero; exit 7"]
BOUND = 64 * 2**20  # bytes the host's memory may grow by while one runs


async def test_an_unread_exec_gives_its_status_and_holds_none_of_its_output(
    manager: SandboxManager, purpose: str
) -> None:
    sandbox = await manager.create("alice", runtime="runc", purpose=purpose)
    engine = manager.backend.engine  # type: ignore[attr-defined]
    container = labels.container_name(sandbox.sandbox_id)
    with peak_growth() as grown:
        code = await asyncio.to_thread(run_unread, engine, container, FLOOD, timeout=60)
    assert code == 7
    assert grown() < BOUND, grown()
    # One that does not end in time: None, and the host does not wait for it.
    endless = ["/bin/sh", "-c", "sleep 30"]
    assert await asyncio.to_thread(run_unread, engine, container, endless, timeout=0.5) is None


async def test_a_streamed_exec_without_a_sink_keeps_only_the_start_of_its_output(
    manager: SandboxManager, purpose: str
) -> None:
    sandbox = await manager.create("alice", runtime="runc", purpose=purpose)
    with peak_growth() as grown:
        result = await manager.backend.exec_stream(sandbox.sandbox_id, FLOOD, timeout=60)
    assert result.exit_code == 7
    assert result.stdout == b"\0" * MAX_UNSUNK_STDOUT
    assert grown() < BOUND, grown()


async def test_an_unread_exec_that_does_not_end_is_asked_after_ever_less_often(
    manager: SandboxManager, purpose: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sandbox can keep an exec from ending (its process stopped): the wait for it backs
    off rather than asking the engine every owner shares at its first, shortest interval."""
    sandbox = await manager.create("alice", runtime="runc", purpose=purpose)
    engine = manager.backend.engine  # type: ignore[attr-defined]
    container = labels.container_name(sandbox.sandbox_id)
    api = engine.client.api
    inspect = api.exec_inspect
    asked = []

    def counted(exec_id: str) -> dict[str, object]:  # the engine's own answer, counted
        asked.append(exec_id)
        return dict(inspect(exec_id))

    monkeypatch.setattr(api, "exec_inspect", counted)
    endless = ["/bin/sh", "-c", "kill -STOP $$"]
    assert await asyncio.to_thread(run_unread, engine, container, endless, timeout=3) is None
    # Every 10 ms, it would be asked up to 300 times; backed off to 200 ms, about 20.
    assert 3 <= len(asked) <= 30, len(asked)
