"""A pause or a removal that lands while execs start in the sandbox (exec_gate.py).

Without the gate a pause wedged the container on the first try: the exec's ``runc init`` waited
in the frozen cgroup, and inspect, resume and remove of the sandbox each hung until their time
limit. Here the execs and the pause go out together, as a panel's stats probe and a click on
Pause, or a fresh sandbox's network forwarder and an early pause, do. A removal racing exec
starts into a sandbox full of running commands took under runsc from 5 s to minutes, or was
refused; here it is asked for while they start, as an owner's DELETE during a flood of commands.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import docker
import docker.errors
import pytest
import requests

from jupyter_sandbox.protocol.errors import SandboxConflictError, SandboxError
from jupyter_sandbox.sandbox import labels
from jupyter_sandbox.sandbox.backends.base import ExecOptions
from jupyter_sandbox.sandbox.backends.docker.exec_gate import ExecGate
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.sandbox_types import Sandbox

pytestmark = pytest.mark.integration


async def test_a_pause_among_starting_execs_leaves_the_sandbox_usable(
    manager: SandboxManager, sandbox: Sandbox
) -> None:
    sandbox_id = sandbox.sandbox_id
    # The engine's limit is what a wedged container shows up as: every call times out.
    manager.backend.engine.timeout = 15  # type: ignore[attr-defined]
    for delay in (0.0, 0.005, 0.02):
        execs = [
            asyncio.ensure_future(
                manager.backend.exec(sandbox_id, ["true"], ExecOptions(timeout=20))
            )
            for _ in range(3)
        ]
        await asyncio.sleep(delay)
        await manager.pause("alice", sandbox_id)
        assert (await manager.get("alice", sandbox_id)).status == "paused"
        await manager.resume("alice", sandbox_id)
        # Each ran (a command the pause froze goes on once resumed) or was refused as paused.
        outcomes = await asyncio.gather(*execs, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                assert isinstance(outcome, SandboxConflictError), outcome
                assert "paused" in str(outcome)
            else:
                assert outcome.exit_code == 0, outcome
        result = await manager.exec("alice", sandbox_id, ["true"], ExecOptions(timeout=20))
        assert result.exit_code == 0
    # And a spawned process (the forwarder's kind), started just before the pause.
    spawn = asyncio.ensure_future(
        manager.backend.spawn(sandbox_id, ["sleep", "30"], environment={})
    )
    await manager.pause("alice", sandbox_id)
    await asyncio.gather(spawn, return_exceptions=True)
    await manager.resume("alice", sandbox_id)
    assert (await manager.get("alice", sandbox_id)).status == "running"


async def test_a_removal_among_starting_execs_removes_the_sandbox(
    manager: SandboxManager, sandbox: Sandbox
) -> None:
    sandbox_id = sandbox.sandbox_id
    running = [
        asyncio.ensure_future(
            manager.backend.exec(sandbox_id, ["sleep", "60"], ExecOptions(timeout=90))
        )
        for _ in range(20)
    ]
    deadline = time.monotonic() + 60
    while len(await sandbox_processes(manager, sandbox_id, "sleep 60")) < 20:
        assert time.monotonic() < deadline, "the twenty commands did not all start"
        await asyncio.sleep(0.5)
    removed = asyncio.Event()

    async def keep_starting() -> None:  # execs go on starting until the sandbox is gone
        while not removed.is_set():
            try:
                await manager.backend.exec(sandbox_id, ["true"], ExecOptions(timeout=60))
            except SandboxError:
                return

    starting = [asyncio.ensure_future(keep_starting()) for _ in range(6)]
    await asyncio.sleep(0.5)
    try:
        await manager.remove("alice", sandbox_id)  # raised "already in progress" (409) before
    finally:
        removed.set()
    assert sandbox_id not in [s.sandbox_id for s in await manager.backend.list_sandboxes()]
    # Every command ended with its sandbox: a result, or an error that says what happened.
    for outcome in await asyncio.gather(*running, *starting, return_exceptions=True):
        assert not isinstance(outcome, BaseException) or isinstance(outcome, SandboxError), outcome


async def sandbox_processes(manager: SandboxManager, sandbox_id: str, command: str) -> list[str]:
    """The command lines of the sandbox's processes that contain ``command``."""
    listed = await manager.backend.exec(
        sandbox_id,
        ["/opt/sandbox/bin/python3", "-I", "-c", LIST_PROCESSES],
        ExecOptions(timeout=30, supervised=False),
    )
    return [line for line in listed.stdout.decode().splitlines() if line == command]


# Prints each process's command line, its arguments joined by spaces (the image has no ps).
LIST_PROCESSES = """
import os
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        print(open(f"/proc/{pid}/cmdline", "rb").read().rstrip(b"\\0").replace(b"\\0", b" ").decode())
    except OSError:
        pass
"""


def test_the_gate_holds_a_pause_until_starting_execs_have_started() -> None:
    gate = ExecGate()
    order: list[str] = []
    in_start = threading.Event()
    release = threading.Event()

    def start() -> None:
        with gate.starting("c", wait=5):
            in_start.set()
            release.wait(5)
            order.append("started")

    def pause() -> None:
        with gate.halting("c", wait=5):
            order.append("paused")

    starter = threading.Thread(target=start)
    starter.start()
    assert in_start.wait(5)
    pauser = threading.Thread(target=pause)
    pauser.start()
    time.sleep(0.05)
    assert order == []  # the pause waits for the start
    release.set()
    starter.join(5)
    pauser.join(5)
    assert order == ["started", "paused"]


def test_a_start_of_several_execs_keeps_a_pause_out_between_them() -> None:
    """A supervised command under gVisor: the command's exec, then the one that places its
    supervisor, as one start (exec_deadline.supervised_start)."""
    gate = ExecGate()
    order: list[str] = []
    first_started = threading.Event()
    pause_waits = threading.Event()

    def start() -> None:
        with gate.starting("c", wait=5):
            with gate.starting("c", wait=5):
                order.append("command")
            first_started.set()
            assert pause_waits.wait(5)
            with gate.starting("c", wait=5):  # not held up by the pause on its way
                order.append("placer")

    def pause() -> None:
        pause_waits.set()
        with gate.halting("c", wait=5):
            order.append("paused")

    starter = threading.Thread(target=start)
    starter.start()
    assert first_started.wait(5)
    pauser = threading.Thread(target=pause)
    pauser.start()
    starter.join(5)
    pauser.join(5)
    assert order == ["command", "placer", "paused"]


def test_no_exec_starts_while_a_pause_is_on_its_way_and_waits_are_bounded() -> None:
    gate = ExecGate()
    order: list[str] = []
    pausing = threading.Event()
    release = threading.Event()

    def pause() -> None:
        with gate.halting("c", wait=5):
            pausing.set()
            release.wait(5)
            order.append("paused")

    pauser = threading.Thread(target=pause)
    pauser.start()
    assert pausing.wait(5)
    starter = threading.Thread(target=lambda: gate.starting("c", wait=5).__enter__())
    starter.start()
    time.sleep(0.05)
    with gate.starting("other", wait=5):  # another container is not held up
        order.append("other started")
    release.set()
    starter.join(5)
    pauser.join(5)
    assert order == ["other started", "paused"]
    # A start that never ends holds a pause only for the pause's wait.
    began = time.monotonic()
    with gate.halting("c", wait=0.2):
        pass
    assert time.monotonic() - began < 2


# How long the helper's unpause is given: one that takes longer is the wedge itself (the
# engine waits on an exec's process in the frozen cgroup), seen under a loaded CI machine.
UNPAUSE_WAIT = 15


def wedge(container: str) -> bool:
    """Pause ``container`` while an exec starts in it, as a process without the gate would
    (another client of the engine); whether the engine was left waiting on the exec: its start,
    or the unpause that follows, does not come back."""
    api = docker.from_env(version="auto", timeout=60).api
    unpausing = docker.from_env(version="auto", timeout=UNPAUSE_WAIT).api
    for attempt in range(30):  # the pause must land inside the exec's start: tens of ms
        try:
            exec_id = api.exec_create(container, ["true"])["Id"]
        except docker.errors.APIError as exc:  # still paused (CI run 42): unpause again
            if "is paused" not in str(exc):
                raise
            try:
                unpausing.unpause(container)
            except requests.exceptions.ReadTimeout:
                return True
            continue
        start = threading.Thread(target=start_exec, args=(api, exec_id), daemon=True)
        start.start()
        time.sleep(0.002 * attempt)
        api.pause(container)
        start.join(3)
        if start.is_alive():
            return True
        try:
            unpausing.unpause(container)
        except requests.exceptions.ReadTimeout:
            return True
    return False


def start_exec(api: docker.APIClient, exec_id: str) -> None:
    """Start an exec that a pause may refuse (409, the container is paused): that refusal is
    one of the outcomes ``wedge`` tries, not a failure of the thread."""
    with contextlib.suppress(docker.errors.APIError, requests.exceptions.RequestException):
        api.exec_start(exec_id)


@pytest.mark.runc
async def test_a_sandbox_wedged_by_another_client_is_still_removed(
    manager: SandboxManager, purpose: str
) -> None:
    sandbox = await manager.create("alice", runtime="runc", purpose=purpose)
    container = labels.container_name(sandbox.sandbox_id)
    # A wedged container answers no unpause until thawed: its removal waits out the unpause's
    # limit (a third of the engine's) before the thaw, 10 s at the default.
    manager.backend.engine.timeout = 15  # type: ignore[attr-defined]
    assert await asyncio.to_thread(wedge, container), "the engine no longer wedges: drop the thaw"
    await manager.backend.remove(sandbox.sandbox_id)  # thawed by hand, then removed
    rows = manager.backend.engine.client.api.containers(  # type: ignore[attr-defined]
        all=True, filters={"name": container}
    )
    assert rows == []
