"""Faults: the Jupyter server killed and started again, the Docker engine restarted under a
running cell. (A proxy kernel killed with SIGKILL and a sandbox killed mid-cell are in
tests/kernel/test_contexts.py, test_lifecycle.py and tests/server_extension/test_culler.py, marked
for the report too.)"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from jupyter_sandbox.sandbox.manager import SandboxManager
from tests.conftest import manager_config, purpose_label
from tests.kernel.kernels import running_kernel, value_of
from tests.kernel.sandbox_env import containers_under, notebook_dir, sandbox_kernel_env
from tests.kernel.test_jupyter_server import Server, start_server, stop_process, wait_for_status
from tests.kernel.test_lifecycle import wait_for_reply, wait_until_dead
from tests.kernel_client import answers

# Restarting the engine stops every container on it, other tests' too: alone (pyproject.toml).
pytestmark = [pytest.mark.integration, pytest.mark.runc, pytest.mark.alone]

REPO = Path(__file__).resolve().parents[2]


async def until(condition: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        await asyncio.sleep(0.5)


def pool_tickets(state_dir: Path) -> set[str]:
    return {ticket.name for ticket in state_dir.glob("pool/*/[0-9a-f]*")}


async def kill_server(server: Server) -> None:
    os.killpg(server.process.pid, signal.SIGKILL)
    await asyncio.to_thread(server.process.wait, 30)


@pytest.mark.resilience(
    scenario="fault: the Jupyter server killed (SIGKILL) and started again",
    expected="its sandboxes are listed and reachable again, the warm pool is full again, no "
    "container is left without a record",
)
async def test_fault_server_killed_and_restarted(
    request: pytest.FixtureRequest, tmp_path: Path, observe: Callable[..., None]
) -> None:
    with sandbox_kernel_env(purpose_label(request.node.nodeid), runtime="runc") as state_dir:
        root = notebook_dir(state_dir)
        (tmp_path / "first").mkdir()
        (tmp_path / "second").mkdir()
        first = start_server(root, tmp_path / "first")
        try:
            await wait_for_status(first)
            made = json.loads(
                (await first.request("POST", "/api/sandboxes", body={"context": "kept"})).body
            )
            await until(lambda: bool(pool_tickets(state_dir)), "the warm pool filled")
        finally:
            await kill_server(first)

        second = start_server(root, tmp_path / "second")
        try:
            await wait_for_status(second)
            listed = json.loads((await second.request("GET", "/api/sandboxes")).body)
            assert [(s["id"], s["status"]) for s in listed] == [(made["id"], "running")]
            manager = SandboxManager.from_config(manager_config(state_dir))
            try:
                kept = await manager.attach(made["owner"], made["id"])
                assert await answers(kept.connection_info, timeout=30)
            finally:
                await manager.close()
            await until(lambda: bool(pool_tickets(state_dir)), "the warm pool is full again")
            # An orphan is a container whose state is gone (a member still starting has one).
            names = {c.name.removeprefix("jupyter-sandbox-") for c in containers_under(state_dir)}
            orphans = {n for n in names if not (state_dir / n / "state.json").is_file()}
            assert orphans == set()
        finally:
            try:  # a shutdown that hangs fails the test, and leaves no server behind
                await second.request("POST", "/api/shutdown", body={})
                await asyncio.to_thread(second.process.wait, 30)
            finally:
                stop_process(second.process)
    observe(
        "after SIGKILL and a new start: the sandbox is listed, running and its kernel answers; "
        f"the pool holds {len(pool_tickets(state_dir)) or 'its'} member(s); every container "
        "has a record (none orphaned)"
    )


def restart_engine() -> float:
    """Stop dockerd (it stops every container) and start it again with the project's own
    bootstrap; return the seconds the engine was away."""
    found = subprocess.run(["pgrep", "-x", "dockerd"], capture_output=True, text=True)
    pids = [int(pid) for pid in found.stdout.split()]
    assert pids, "no dockerd process: this test restarts the engine engine-bootstrap.sh started"
    started = time.monotonic()
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 90
    while subprocess.run(["pgrep", "-x", "dockerd"], capture_output=True).returncode == 0:
        assert time.monotonic() < deadline, "dockerd did not stop within 90 s"
        time.sleep(0.5)
    subprocess.run(["bash", str(REPO / "scripts" / "engine-bootstrap.sh")], check=True, timeout=180)
    return time.monotonic() - started


@pytest.mark.resilience(
    scenario="fault: the Docker engine restarted under a running cell",
    expected="the cell fails with SandboxDied naming the cause once the engine answers again, "
    "the kernel ends (Jupyter's restarter takes over); a new kernel works",
)
def test_fault_engine_restarted_under_a_running_cell(
    request: pytest.FixtureRequest, observe: Callable[..., None]
) -> None:
    with sandbox_kernel_env(purpose_label(request.node.nodeid), runtime="runc") as state_dir:
        with running_kernel(notebook_dir(state_dir)) as (km, kc):
            assert value_of(kc, "6 * 7") == "42"
            msg_id = kc.execute("import time; time.sleep(600)")
            time.sleep(1)  # the cell runs when the engine goes away
            away = restart_engine()
            reply = wait_for_reply(kc, msg_id, timeout=120)
            assert reply["status"] == "error"
            assert reply["ename"] == "SandboxDied"
            wait_until_dead(km)
        with running_kernel(notebook_dir(state_dir)) as (_, kc):
            assert value_of(kc, "6 * 7") == "42"
    observe(
        f"engine away {away:.0f} s; the running cell failed with SandboxDied "
        f"({str(reply['evalue'])[:120]}); the kernel ended; a new kernel ran a cell"
    )
