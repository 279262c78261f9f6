"""Culling: idle and expired sandboxes go, attached and busy ones stay, orphans are reaped."""

from __future__ import annotations

import asyncio
import datetime
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.manager import AsyncKernelManager

from jupyter_sandbox.protocol.errors import InvalidRequestError
from jupyter_sandbox.sandbox.lifecycle.contexts import ContextLock
from jupyter_sandbox.sandbox.lifecycle.culler import SandboxCuller
from jupyter_sandbox.server_extension import SandboxExtension
from tests.server_extension.conftest import Fetch, api

NOW = datetime.datetime(2026, 11, 30, 12, 0, tzinfo=datetime.timezone.utc)


def ago(seconds: float) -> str:
    return (NOW - datetime.timedelta(seconds=seconds)).isoformat(timespec="seconds")


def state(**fields: Any) -> dict[str, Any]:
    return {
        "owner": "alice",
        "context": "c1",
        "created": ago(100),
        "last_activity": ago(100),
        **fields,
    }


@pytest.fixture
def culler(manager: Any) -> SandboxCuller:
    return SandboxCuller(manager, idle_timeout=50.0, ttl=1000.0)


def test_idle_detached_sandbox_is_culled(culler: SandboxCuller) -> None:
    assert "idle for 100 s" in str(culler.reason_to_cull(state(), NOW))
    assert culler.reason_to_cull(state(last_activity=ago(10)), NOW) is None


def test_ttl_applies_even_to_recently_active(culler: SandboxCuller) -> None:
    reason = culler.reason_to_cull(state(created=ago(2000), last_activity=ago(1)), NOW)
    assert "time to live" in str(reason)


def test_attached_idle_kernel_is_left_to_jupyter(culler: SandboxCuller, state_dir: Path) -> None:
    with ContextLock(state_dir, "alice", "c1"):
        assert culler.reason_to_cull(state(), NOW) is None
        culler.cull_attached = True
        assert culler.reason_to_cull(state(), NOW) is not None


def test_nothing_is_culled_while_a_cell_runs(culler: SandboxCuller, state_dir: Path) -> None:
    old = state(busy=True, created=ago(5000))
    with ContextLock(state_dir, "alice", "c1"):
        assert culler.reason_to_cull(old, NOW) is None
    # The kernel that said busy is gone: its word no longer holds.
    assert culler.reason_to_cull(old, NOW) is not None


def test_a_sandbox_in_use_is_never_idle_but_still_has_its_deadlines(
    culler: SandboxCuller,
) -> None:
    assert culler.reason_to_cull(state(last_activity=ago(9999)), NOW, in_use=True) is None
    reason = culler.reason_to_cull(state(expires=ago(1)), NOW, in_use=True)
    assert "past its timeout" in str(reason)
    reason = culler.reason_to_cull(state(created=ago(2000)), NOW, in_use=True)
    assert "time to live" in str(reason)


def test_pool_members_and_half_made_sandboxes_are_not_culled(culler: SandboxCuller) -> None:
    assert culler.reason_to_cull(state(pool="k", created=ago(9999)), NOW) is None
    assert culler.reason_to_cull({}, NOW) is None


@pytest.mark.integration
@pytest.mark.checklist(
    row=38,
    attack="a sandbox left idle past its timeout",
    expected="culled by the server's culler; active sandboxes stay",
)
async def test_culling_pass_on_real_sandboxes(
    jp_fetch: Fetch, extension: SandboxExtension, observe: Callable[..., None]
) -> None:
    _, idle = await api(jp_fetch, "POST", body={"context": "idle"})
    _, active = await api(jp_fetch, "POST", body={"context": "active"})
    long_ago = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=2)
    extension.manager.update_state(idle["id"], last_activity=long_ago.isoformat())
    extension.culler.idle_timeout = 3600.0

    assert await extension.culler.cull_once() == [idle["id"]]
    _status, listed = await api(jp_fetch, "GET")
    assert [s["id"] for s in listed] == [active["id"]]
    observe("the sandbox idle for 2 h (timeout 1 h) was culled; the active one stayed")


@pytest.mark.integration
async def test_commands_and_files_keep_a_rest_sandbox_from_idling(
    jp_fetch: Fetch, extension: SandboxExtension
) -> None:
    """A sandbox used only over REST: a command running past the idle timeout keeps it, and
    commands and file operations count as its activity (sandbox/lifecycle/usage.py)."""
    _, sandbox = await api(jp_fetch, "POST", body={"runtime": "runc"})
    sandbox_id = sandbox["id"]
    manager, culler = extension.manager, extension.culler
    culler.idle_timeout = 3600.0
    # Every operation's record written: this test moves last_activity into the past between
    # operations a moment apart, which the clock never does (usage.RECORD_INTERVAL).
    manager.usage.interval = 0.0
    long_ago = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=2)

    def idle_for_hours() -> None:
        manager.update_state(sandbox_id, last_activity=long_ago.isoformat())

    def active_since(began: datetime.datetime) -> bool:
        recorded = datetime.datetime.fromisoformat(manager.read_state(sandbox_id)["last_activity"])
        return recorded >= began.replace(microsecond=0)

    body = {"command": ["sh", "-c", "touch /tmp/started; sleep 2"]}
    command = asyncio.ensure_future(api(jp_fetch, "POST", sandbox_id, "commands", body=body))
    for _ in range(100):  # until the command runs (10 s at most)
        if await _exists(jp_fetch, sandbox_id, "/tmp/started"):
            break
        await asyncio.sleep(0.1)
    assert not command.done(), "the command ended before the culler's pass: raise its sleep"
    idle_for_hours()  # as if the command had run for hours
    assert await culler.cull_once() == []  # in use: not idle
    began = datetime.datetime.now(datetime.timezone.utc)
    status, result = await command
    assert (status, result["exit_code"]) == (200, 0)
    assert active_since(began)  # its end was recorded

    idle_for_hours()
    began = datetime.datetime.now(datetime.timezone.utc)
    content = ("api", "sandboxes", sandbox_id, "files", "content")
    await jp_fetch(*content, method="PUT", params={"path": "a.txt"}, body=b"kept")
    assert active_since(began)
    assert await culler.cull_once() == []

    idle_for_hours()  # nothing runs now: idle it is
    assert await culler.cull_once() == [sandbox_id]


async def _exists(fetch: Fetch, sandbox_id: str, path: str) -> bool:
    body = {"command": ["test", "-e", path]}
    status, result = await api(fetch, "POST", sandbox_id, "commands", body=body)
    assert status == 200, result
    return bool(result["exit_code"] == 0)


@pytest.mark.integration
async def test_busy_attached_kernel_survives_until_its_cell_ends(
    kernel_env: dict[str, str], extension: SandboxExtension, tmp_path: Path
) -> None:
    km = AsyncKernelManager(kernel_name="sandboxed-python")
    await km.start_kernel(cwd=str(tmp_path), env={**kernel_env, "JUPYTER_SANDBOX_CONTEXT": "busy"})
    kc = km.client()
    kc.start_channels()
    try:
        await kc.wait_for_ready(timeout=120)
        extension.culler.ttl = 1.0
        extension.culler.idle_timeout = 0.0
        msg_id = kc.execute("import time; time.sleep(6)")
        await asyncio.sleep(2)  # the cell runs
        assert await extension.culler.cull_once() == []
        while (await kc.get_shell_msg(timeout=30))["parent_header"].get("msg_id") != msg_id:
            pass  # replies to wait_for_ready's kernel_info requests
        await asyncio.sleep(0.5)  # the proxy records that the cell ended
        assert len(await extension.culler.cull_once()) == 1
    finally:
        kc.stop_channels()
        await km.shutdown_kernel(now=True)


@pytest.mark.integration
@pytest.mark.checklist(
    row=38,
    attack="a proxy kernel killed with SIGKILL, leaving its sandbox behind",
    expected="the orphan is reaped once its context lock has been free for the grace period",
)
async def test_sandbox_of_a_sigkilled_kernel_is_reaped(
    kernel_env: dict[str, str],
    extension: SandboxExtension,
    tmp_path: Path,
    observe: Callable[..., None],
) -> None:
    km = AsyncKernelManager(kernel_name="sandboxed-python")
    await km.start_kernel(cwd=str(tmp_path), env=kernel_env)
    kc = km.client()
    kc.start_channels()
    await kc.wait_for_ready(timeout=120)
    kc.stop_channels()
    [before] = await extension.manager.list_sandboxes(extension.owner_of(None))  # type: ignore[arg-type]
    pid = km.provisioner.process.pid  # type: ignore[union-attr]
    os.kill(pid, signal.SIGKILL)
    await km.shutdown_kernel(now=True)  # collects the dead process; the sandbox is on its own
    assert [s.sandbox_id for s in await extension.manager.list_sandboxes(before.owner)] == [
        before.sandbox_id
    ]

    extension.culler.orphan_grace = 1.0
    await asyncio.sleep(1.5)
    await extension.culler.cull_once()
    assert await extension.manager.list_sandboxes(before.owner) == []
    observe("the SIGKILLed kernel's sandbox was reaped after the 1 s grace")


def test_a_sandbox_goes_at_its_own_timeout_or_its_ttl_whichever_is_first(
    culler: SandboxCuller,
) -> None:
    soon = (NOW + datetime.timedelta(seconds=30)).isoformat()
    assert culler.deadline(state(expires=soon)) == NOW + datetime.timedelta(seconds=30)
    # ttl (1000 s) from creation (100 s ago) comes before a timeout 10000 s from now.
    late = (NOW + datetime.timedelta(seconds=10000)).isoformat()
    assert culler.deadline(state(expires=late)) == NOW + datetime.timedelta(seconds=900)
    assert "past its timeout" in str(culler.reason_to_cull(state(expires=ago(1)), NOW))
    # Activity does not put a deadline off; only a running cell does.
    assert culler.reason_to_cull(state(expires=ago(1), last_activity=ago(0)), NOW) is not None
    culler.ttl = 0.0
    assert culler.deadline(state()) is None
    assert culler.reason_to_cull(state(expires=ago(1), created=ago(99999)), NOW) is not None


def test_a_timeout_may_not_outlast_the_ttl(culler: SandboxCuller) -> None:
    now = datetime.datetime.now(datetime.timezone.utc)
    created = (now - datetime.timedelta(seconds=400)).isoformat()
    with pytest.raises(InvalidRequestError, match="at most 600 s are left"):
        culler.expiry({"created": created}, 700)
    assert culler.expiry({"created": created}, 500) > now
    assert culler.expiry({}, 1000) > now  # a new sandbox: ttl from now


@pytest.mark.integration
async def test_the_culler_wakes_for_a_deadline(
    jp_fetch: Fetch, extension: SandboxExtension
) -> None:
    # pytest-jupyter's server does not start the extension's tasks: the culler runs here, with
    # its interval an hour (conftest), so only the deadlines can bring these passes on.
    culling = asyncio.create_task(extension.culler.run())
    try:
        status, _ = await api(jp_fetch, "POST", body={"timeout": 2})
        assert status == 201
        _, moved = await api(jp_fetch, "POST", body={})
        _, kept = await api(jp_fetch, "POST", body={"timeout": 600})
        status, _ = await api(jp_fetch, "PUT", moved["id"], "timeout", body={"timeout": 1})
        assert status == 200
        for _ in range(100):
            _, listed = await api(jp_fetch, "GET")
            if [s["id"] for s in listed] == [kept["id"]]:
                break
            await asyncio.sleep(0.1)
        assert [s["id"] for s in listed] == [kept["id"]]
    finally:
        culling.cancel()
