"""Ready clients of a sandbox's kernel kept between code runs (sandbox/kernel_link/clients.py),
against a real engine: a second run reuses the first's client, runs in parallel each have
their own, a restarted interpreter or an interrupted run never lends a client again, a kept
client whose kernel went away fails its run with the cause, and nothing stays open once the
manager closes."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from jupyter_sandbox.protocol.errors import SandboxDiedError
from jupyter_sandbox.sandbox.kernel_link.clients import ClientCounts
from jupyter_sandbox.sandbox.manager import Sandbox, SandboxManager
from jupyter_sandbox.sandbox.operations.code_runs import CodeRequest, CodeResult, run_code
from tests.conftest import manager_config


async def run(
    manager: SandboxManager, sandbox: Sandbox, code: str, timeout: float = 30
) -> CodeResult:
    return await run_code(manager, "alice", sandbox.sandbox_id, CodeRequest(code, timeout))


@pytest.fixture
async def runc_sandbox(manager: SandboxManager, purpose: str) -> Sandbox:
    sandbox = await manager.create("alice", runtime="runc", purpose=purpose)
    # Its network forwarder starts beside the caller (starting.py): let it finish, so that its
    # engine connection is not counted among the descriptors a test compares.
    await asyncio.gather(*manager.forwarder_spawns.values())
    return sandbox


async def test_a_second_run_reuses_the_first_runs_client(
    manager: SandboxManager, sandbox: Sandbox
) -> None:
    assert (await run(manager, sandbox, "x = 1")).status == "ok"
    assert manager.kernel_clients.idle(sandbox.sandbox_id) == 1
    second = await run(manager, sandbox, "x + 1")
    assert second.outputs[0]["data"] == {"text/plain": "2"}
    assert manager.kernel_clients.counts == ClientCounts(made=1, reused=1, closed=0)
    # An exception in the code is a clean end: the client is kept.
    assert (await run(manager, sandbox, "1 / 0")).status == "error"
    assert manager.kernel_clients.counts == ClientCounts(made=1, reused=2, closed=0)


async def test_runs_in_parallel_each_have_their_own_client_and_see_only_their_output(
    manager: SandboxManager, runc_sandbox: Sandbox
) -> None:
    code = "import time\nfor _ in range(3):\n    print('{0}', flush=True)\n    time.sleep(0.05)"
    results = await asyncio.gather(
        *(run(manager, runc_sandbox, code.format(name)) for name in ("a", "b", "c"))
    )
    assert [r.stdout for r in results] == ["a\na\na\n", "b\nb\nb\n", "c\nc\nc\n"]
    # Three at once: three clients, of which two (the cap) are kept.
    assert manager.kernel_clients.counts == ClientCounts(made=3, reused=0, closed=1)
    assert manager.kernel_clients.idle(runc_sandbox.sandbox_id) == 2
    again = await asyncio.gather(
        *(run(manager, runc_sandbox, code.format(name)) for name in ("d", "e"))
    )
    assert [r.stdout for r in again] == ["d\nd\nd\n", "e\ne\ne\n"]
    assert manager.kernel_clients.counts == ClientCounts(made=3, reused=2, closed=1)


async def test_output_that_came_to_an_idle_client_is_not_the_next_runs(
    manager: SandboxManager, runc_sandbox: Sandbox
) -> None:
    late = "import threading, time\nthreading.Timer(0.2, lambda: print('late', flush=True)).start()"
    assert (await run(manager, runc_sandbox, late)).stdout == ""
    await asyncio.sleep(0.5)  # the thread printed to the kept client's iopub meanwhile
    result = await run(manager, runc_sandbox, "print('mine')")
    assert result.stdout == "mine\n"
    assert manager.kernel_clients.counts.reused == 1


async def test_a_restart_between_runs_makes_the_next_run_use_a_fresh_client(
    manager: SandboxManager, runc_sandbox: Sandbox
) -> None:
    assert (await run(manager, runc_sandbox, "before = 1")).status == "ok"
    await manager.restart_kernel("alice", runc_sandbox.sandbox_id)
    result = await run(manager, runc_sandbox, "'before' in globals()")
    assert result.status == "ok"
    assert result.outputs[0]["data"] == {"text/plain": "False"}  # the new interpreter
    assert result.execution_count == 1
    assert manager.kernel_clients.counts == ClientCounts(made=2, reused=0, closed=1)


async def test_an_interrupted_or_abandoned_runs_client_is_closed_not_kept(
    manager: SandboxManager, runc_sandbox: Sandbox
) -> None:
    timed_out = await run(manager, runc_sandbox, "import time\ntime.sleep(30)", timeout=0.5)
    assert timed_out.timed_out
    assert manager.kernel_clients.idle(runc_sandbox.sandbox_id) == 0
    assert manager.kernel_clients.counts == ClientCounts(made=1, reused=0, closed=1)
    abandoned = asyncio.ensure_future(run(manager, runc_sandbox, "import time\ntime.sleep(30)"))
    await asyncio.sleep(0.5)
    abandoned.cancel()
    with pytest.raises(asyncio.CancelledError):
        await abandoned
    assert manager.kernel_clients.counts == ClientCounts(made=2, reused=0, closed=2)
    assert (await run(manager, runc_sandbox, "'after'")).status == "ok"
    assert manager.kernel_clients.counts == ClientCounts(made=3, reused=0, closed=2)


async def test_a_kept_client_whose_kernel_went_away_fails_its_run_with_the_cause(
    manager: SandboxManager, runc_sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert (await run(manager, runc_sandbox, "1")).status == "ok"
    running = manager.running

    async def then_stopped(owner: str, sandbox_id: str) -> object:
        info = await running(owner, sandbox_id)
        await manager.backend.stop(sandbox_id, timeout=0)  # after the run's own check
        return info

    monkeypatch.setattr(manager, "running", then_stopped)
    with pytest.raises(SandboxDiedError, match="ended without a result: the sandbox stopped"):
        await run(manager, runc_sandbox, "2")
    assert manager.kernel_clients.counts == ClientCounts(made=1, reused=1, closed=1)
    assert manager.kernel_clients.idle(runc_sandbox.sandbox_id) == 0


async def test_idle_clients_are_closed_after_their_idle_time(
    manager: SandboxManager, runc_sandbox: Sandbox
) -> None:
    manager.kernel_clients.idle_timeout = 0.3
    assert (await run(manager, runc_sandbox, "1")).status == "ok"
    assert manager.kernel_clients.idle(runc_sandbox.sandbox_id) == 1
    await asyncio.sleep(0.6)
    assert manager.kernel_clients.idle(runc_sandbox.sandbox_id) == 0
    assert manager.kernel_clients.counts.closed == 1


async def test_removing_the_sandbox_closes_its_idle_clients(
    manager: SandboxManager, runc_sandbox: Sandbox
) -> None:
    assert (await run(manager, runc_sandbox, "1")).status == "ok"
    await manager.remove("alice", runc_sandbox.sandbox_id)
    assert manager.kernel_clients.idle(runc_sandbox.sandbox_id) == 0
    assert manager.kernel_clients.counts.closed == 1


async def test_closing_the_manager_closes_every_kept_client_and_leaks_no_descriptor(
    manager: SandboxManager, runc_sandbox: Sandbox, state_dir: Path
) -> None:
    before = _open_descriptors()
    other = SandboxManager.from_config(manager_config(state_dir))  # its own pool and engine
    other.load_backend()
    await asyncio.gather(*(run(other, runc_sandbox, "1") for _ in range(3)))
    assert other.kernel_clients.idle(runc_sandbox.sandbox_id) == 2
    held = _open_descriptors()
    assert sum(1 for target in held.values() if target.startswith(str(state_dir))) == 10
    await other.close()
    assert other.kernel_clients.idle(runc_sandbox.sandbox_id) == 0
    assert other.kernel_clients.counts == ClientCounts(made=3, reused=0, closed=3)
    assert _open_descriptors() == before


def _open_descriptors() -> dict[int, str]:
    """This process's open descriptors and what each reaches (a pin: a socket file's path)."""
    found = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            found[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # the listing's own descriptor, closed already
            continue
    return found
