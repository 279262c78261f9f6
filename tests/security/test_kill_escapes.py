"""Rows 52 to 54: processes that leave their session, process group and environment (``setsid
env -i``, and the same after a double fork) are killed with the command that started them when
its time is up, when it is a background command that is removed, and when it is a terminal's
shell that is closed (exec_deadline.py, supervisor_program.py, kill_program.py)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable

import pytest

from jupyter_sandbox.sandbox.backends.base import ExecOptions
from jupyter_sandbox.sandbox.manager import Sandbox, SandboxManager
from jupyter_sandbox.sandbox.operations.commands import CommandRequest
from jupyter_sandbox.sandbox.programs import image_programs

pytestmark = pytest.mark.integration

# The command line of every process in the sandbox (it has no ps), one a line.
PROCESSES = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done"


def escapes(first: int) -> str:
    """Shell lines starting three sleeps of ``first`` on: one that left its session and group
    and emptied its environment; one that did too and then lost its parent (a double fork, so
    that it is an orphan); and one that stays, for the command to wait on."""
    return (
        f"setsid env -i sleep {first} & "
        f"(setsid env -i sh -c 'sleep {first + 1} &'); "
        f"sleep {first + 2}"
    )


async def sleeps(manager: SandboxManager, sandbox: Sandbox, first: int) -> list[str]:
    """The command lines of the sandbox's processes sleeping ``first`` to ``first + 2``."""
    listing = await manager.exec(
        "alice", sandbox.sandbox_id, image_programs.shell(PROCESSES), ExecOptions(supervised=False)
    )
    lines = [line.strip() for line in listing.stdout.decode().splitlines()]
    wanted = {f"sleep {first + n}" for n in range(3)}
    return [line for line in lines if line in wanted]


async def until(check: Callable[[], Awaitable[bool]], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not await check():
        assert time.monotonic() < deadline, "the condition never held"
        await asyncio.sleep(0.1)


async def all_three_run(manager: SandboxManager, sandbox: Sandbox, first: int) -> None:
    async def three() -> bool:
        return len(await sleeps(manager, sandbox, first)) == 3

    await until(three)


@pytest.mark.checklist(
    row=52,
    attack="a command past its time limit that started `setsid env -i sleep` and a "
    "double-forked `setsid env -i` orphan (new session, new group, empty environment)",
    expected="the time limit kills the command and both escapees; nothing of it is left",
)
async def test_row52_a_timed_out_command_takes_its_escapees_with_it(
    manager: SandboxManager, sandbox: Sandbox, observe: Callable[[str], None]
) -> None:
    request = CommandRequest.from_json({"command": escapes(5201), "timeout": 3})
    started = time.monotonic()
    result = await manager.exec(
        "alice", sandbox.sandbox_id, request.argv, ExecOptions(timeout=request.timeout)
    )
    took = time.monotonic() - started
    assert result.timed_out
    left = await sleeps(manager, sandbox, 5201)
    assert left == [], left
    observe(f"timed out after {took:.1f} s (limit 3 s); processes left: none")


@pytest.mark.checklist(
    row=53,
    attack="a background command that started `setsid env -i sleep` and a double-forked "
    "`setsid env -i` orphan, then removed",
    expected="removing it kills the command and both escapees",
)
async def test_row53_a_removed_background_command_takes_its_escapees_with_it(
    manager: SandboxManager, sandbox: Sandbox, observe: Callable[[str], None]
) -> None:
    request = CommandRequest.from_json({"command": escapes(5301)})
    command = await manager.background.start("alice", sandbox.sandbox_id, request)
    await all_three_run(manager, sandbox, 5301)
    await manager.background.remove("alice", sandbox.sandbox_id, command.command_id)
    left = await sleeps(manager, sandbox, 5301)
    assert left == [], left
    observe("all three sleeps ran; after the removal: none left")


@pytest.mark.checklist(
    row=54,
    attack="`setsid env -i sleep &` and a double-forked `setsid env -i` orphan typed into a "
    "terminal, then the terminal closed",
    expected="closing the terminal kills the shell and both escapees",
)
async def test_row54_a_closed_terminal_takes_its_escapees_with_it(
    manager: SandboxManager, sandbox: Sandbox, observe: Callable[[str], None]
) -> None:
    terminal = await manager.open_terminal("alice", sandbox.sandbox_id)
    try:
        token = uuid.uuid4().hex[:8]
        # The last sleep in the background too: the shell goes on reading.
        line = escapes(5401).replace("; sleep 5403", "; sleep 5403 &")
        await terminal.write(f"{line} echo {token}-$((6*7))\r".encode())
        seen = b""
        while f"{token}-42".encode() not in seen:
            piece = await asyncio.wait_for(terminal.read(), 30)
            assert piece, seen
            seen += piece
        await all_three_run(manager, sandbox, 5401)
    finally:
        await terminal.close()
    left = await sleeps(manager, sandbox, 5401)
    assert left == [], left
    observe("all three sleeps ran; after the terminal closed: none left")


# Where gVisor shows its job cgroups in a sandbox: the escapee tries to move itself out of its
# command's cgroup into the sandbox's own (there is no such directory under runc).
LEAVE_CGROUP = "{ echo \\$\\$ > /sys/fs/cgroup/job/cgroup.procs; } 2>/dev/null"


def killing_its_supervisor(first: int) -> str:
    """Shell lines whose escapee kills the command's supervisor (the shell's parent, of the
    same user) once it has left its session and group and emptied its environment, tries to
    leave the command's cgroup, then sleeps ``first`` on; ``first + 1`` is the shell's own
    wait."""
    return (
        f's=$PPID; setsid env -i /bin/sh -c "kill -9 $s; {LEAVE_CGROUP}; exec sleep {first}" & '
        f"sleep {first + 1}"
    )


@pytest.mark.checklist(
    row=73,
    attack="a background command whose child leaves its session and group, empties its "
    "environment (`setsid env -i`) and SIGKILLs the command's supervisor (same user), then the "
    "command removed",
    expected="removing it kills the escapee too: it carries the supervisor's audit login uid "
    "(runc) or sits in the command's cgroup (gVisor's job hierarchy, made and entered by uid 0 "
    "before the command started), neither of which it can leave",
)
async def test_row73_an_escapee_that_killed_its_supervisor_is_killed_with_the_command(
    manager: SandboxManager, sandbox: Sandbox, observe: Callable[[str], None]
) -> None:
    command_request = CommandRequest.from_json({"command": killing_its_supervisor(7301)})
    command = await manager.background.start("alice", sandbox.sandbox_id, command_request)

    async def escaped() -> bool:
        return "sleep 7301" in await sleeps(manager, sandbox, 7301)

    await until(escaped)
    supervisors = await manager.exec(
        "alice",
        sandbox.sandbox_id,
        image_programs.shell(f"{PROCESSES} | grep -c -- '-I -S -c' || true"),
        ExecOptions(supervised=False),
    )
    await manager.background.remove("alice", sandbox.sandbox_id, command.command_id)
    left = await sleeps(manager, sandbox, 7301)
    assert left == [], left
    observe(
        "the escapee ran with its supervisor killed "
        f"({supervisors.stdout.decode().strip()} supervisor processes left in the sandbox); "
        "after the removal: nothing left"
    )
