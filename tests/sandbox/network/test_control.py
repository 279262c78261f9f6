"""A policy change whose host proxy waits on a sandbox holds none of the threads every owner's
host work shares."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from jupyter_sandbox.sandbox.backends.base import ExecOptions
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.network.control import TUNNEL_SOCKET, proxy_running
from jupyter_sandbox.sandbox.network.forwarder import CONFIG_VARIABLE

pytestmark = pytest.mark.integration

# The default pool's threads in this test: fewer than alice's sandboxes, so that on threads
# her stalled policy changes would take them all (the server's pool is only a few more).
THREADS = 2
ALICE_SANDBOXES = THREADS + 1

# Stops, as the sandbox's user, every process of the sandbox that carries the forwarder's
# configuration (the forwarder, network/forwarder.py); prints how many it stopped.
STOP_FORWARDER = f"""
n=0
for p in /proc/[0-9]*; do
  if grep -qs {CONFIG_VARIABLE} "$p/environ" && kill -STOP "${{p#/proc/}}"; then n=$((n+1)); fi
done
echo $n
"""


async def _stop_forwarder(manager: SandboxManager, sandbox_id: str) -> None:
    directory = SandboxDirectory(manager.settings.state_path, sandbox_id)
    deadline = time.monotonic() + 60
    while not (directory.io / TUNNEL_SOCKET).exists():  # spawned beside the sandbox's start
        assert time.monotonic() < deadline, "the forwarder never listened"
        await asyncio.sleep(0.1)
    result = await manager.exec(
        "alice", sandbox_id, ["sh", "-c", STOP_FORWARDER], ExecOptions(timeout=30)
    )
    assert result.exit_code == 0, result
    assert int(result.stdout) >= 1, result


@pytest.mark.checklist(
    row=147,
    attack="an owner stops the network forwarder inside each of several sandboxes (kill -STOP "
    "as the sandbox's user), then asks for open network on all of them at once, so that each "
    "host proxy waits for a tunnel that never opens",
    expected="the waits hold no thread of the server's shared pool: another owner's sandbox is "
    "created and removed while they are all still waiting",
)
async def test_a_stalled_host_proxy_start_holds_no_shared_thread(
    manager: SandboxManager, runtime: str, purpose: str, observe: Any
) -> None:
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=THREADS))
    alice = [
        await manager.create("alice", runtime=runtime, purpose=purpose)
        for _ in range(ALICE_SANDBOXES)
    ]
    for sandbox in alice:
        await _stop_forwarder(manager, sandbox.sandbox_id)
    changes = [
        asyncio.ensure_future(
            manager.set_network_policy("alice", sandbox.sandbox_id, {"mode": "open"})
        )
        for sandbox in alice
    ]
    try:
        directories = [SandboxDirectory(manager.settings.state_path, s.sandbox_id) for s in alice]
        deadline = time.monotonic() + 60
        # As many host proxies wait as the pool has threads (on threads, they would take them
        # all; off them, the others start too).
        while sum(proxy_running(d) for d in directories) < THREADS:
            assert time.monotonic() < deadline, "the host proxies never started"
            assert not any(change.done() for change in changes), changes
            await asyncio.sleep(0.1)

        began = time.monotonic()
        bob = await manager.create("bob", runtime=runtime, purpose=purpose)
        await manager.remove("bob", bob.sandbox_id)
        took = time.monotonic() - began

        waiting = sum(not change.done() for change in changes)
        assert waiting == len(changes), [c for c in changes if c.done()]
    finally:
        for change in changes:
            change.cancel()
        await asyncio.gather(*changes, return_exceptions=True)
    observe(
        f"bob's create and delete took {took:.1f} s while alice's {len(changes)} network "
        f"changes on {len(alice)} sandboxes with stopped forwarders all still waited"
    )
