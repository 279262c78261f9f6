"""`jupyter sandbox background start|list|output|rm` as a person without a Jupyter Server runs
them, against real sandboxes (runc is enough: the runtime is the core's concern, tested in
tests/sandbox/operations/test_background.py)."""

from __future__ import annotations

import asyncio
import re
import shlex
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.operations.background import BackgroundCommand
from tests.cli.cli_processes import interrupted

pytestmark = [pytest.mark.integration, pytest.mark.runc]
# The image has no ps: the command lines of every process, one per line, from /proc.
PROCESSES = "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done 2>/dev/null"


def background_command(state_dir: Path, verb: str, *args: str) -> list[str]:
    return [
        *(sys.executable, "-m", "jupyter_sandbox.cli", "background", verb),
        *(f"--SandboxSettings.state_dir={state_dir}", "--owner=alice"),
        *args,
    ]


async def background_cli(
    state_dir: Path, verb: str, *args: str
) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        background_command(state_dir, verb, *args),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )


async def new_sandbox(manager: SandboxManager, purpose: str) -> str:
    return (await manager.create("alice", runtime="runc", purpose=purpose)).sandbox_id


async def started(state_dir: Path, sandbox_id: str, *args: str) -> str:
    """Start a command with the CLI; its id."""
    result = await background_cli(state_dir, "start", sandbox_id, *args)
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(r"[0-9a-f]{12}\n", result.stdout), result.stdout
    return result.stdout.strip()


async def ended(manager: SandboxManager, sandbox_id: str, command_id: str) -> BackgroundCommand:
    for _ in range(300):
        found = await manager.background.get("alice", sandbox_id, command_id)
        if not found.running:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"command {command_id} never ended")


async def test_start_list_and_the_output_of_an_ended_command(
    manager: SandboxManager, state_dir: Path, purpose: str
) -> None:
    sandbox_id = await new_sandbox(manager, purpose)
    show = 'echo "$GREETING from $PWD"; echo oops >&2; exit 5'
    result = await background_cli(
        state_dir,
        "start",
        "--env",
        "GREETING=hello",
        "--cwd=/tmp",
        sandbox_id,
        "--",
        "sh",
        "-c",
        show,
    )
    assert result.returncode == 0, result.stderr
    command_id = result.stdout.strip()
    assert result.stdout == f"{command_id}\n"  # one line: id=$(... start ...) takes it
    assert result.stderr == (
        "started; its output: jupyter sandbox background output --follow --owner=alice "
        f"{sandbox_id} {command_id}\n"
    )
    assert (await ended(manager, sandbox_id, command_id)).exit_code == 5

    # More than one read's worth (MAX_READ, 1 MiB): printed whole, piece by piece.
    big = await started(
        state_dir, sandbox_id, "--", "sh", "-c", "head -c 2500000 /dev/zero | tr '\\0' x"
    )
    await ended(manager, sandbox_id, big)

    listed = await background_cli(state_dir, "list", sandbox_id)
    assert listed.returncode == 0, listed.stderr
    header, first, second = listed.stdout.splitlines()
    assert header.split() == ["COMMAND", "STATUS", "STARTED", "COMMAND", "LINE"]
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"  # UTC, to the second
    line = re.escape(shlex.join(["sh", "-c", show]))  # as a shell would take it back
    assert re.fullmatch(f"{command_id}  exit 5     {stamp}  {line}", first), first
    assert second.startswith(f"{big}  exit 0 ")

    out = await background_cli(state_dir, "output", sandbox_id, command_id)
    assert (out.returncode, out.stdout, out.stderr) == (0, "hello from /tmp\noops\n", "")
    # An ended command followed: everything at once, then its status.
    followed = await background_cli(state_dir, "output", "--follow", sandbox_id, command_id)
    assert (followed.returncode, followed.stdout) == (5, "hello from /tmp\noops\n")
    whole = await background_cli(state_dir, "output", sandbox_id, big)
    assert whole.returncode == 0, whole.stderr
    assert whole.stdout == "x" * 2_500_000

    # Output ending in half a character: once the command has ended nothing completes it, so
    # the last read gives it as U+FFFD, and the CLI ends rather than wait for its rest.
    cut = await started(state_dir, sandbox_id, "--", "printf", "ab\\342\\202")
    await ended(manager, sandbox_id, cut)
    for options in ([], ["--follow"]):
        shown = await background_cli(state_dir, "output", *options, sandbox_id, cut)
        assert (shown.returncode, shown.stdout) == (0, "ab\ufffd"), (options, shown.stderr)


async def test_follow_prints_as_it_comes_and_exits_with_the_status(
    manager: SandboxManager, state_dir: Path, purpose: str
) -> None:
    sandbox_id = await new_sandbox(manager, purpose)
    # Waits for the test to say go, then prints over about a second and exits 3.
    code = (
        "echo first; while [ ! -e /workspace/go ]; do sleep 0.1; done; "
        "for i in 2 3 4 5; do echo line $i; sleep 0.3; done; exit 3"
    )
    command_id = await started(state_dir, sandbox_id, "--", "sh", "-c", code)

    def follow() -> tuple[list[str], str, int]:
        with subprocess.Popen(
            background_command(state_dir, "output", "--follow", sandbox_id, command_id),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as process:
            assert process.stdout is not None
            assert process.stderr is not None
            lines = [process.stdout.readline()]  # while the command still waits
            go = ["sh", "-c", "touch /workspace/go"]
            asyncio.run_coroutine_threadsafe(manager.exec("alice", sandbox_id, go), loop).result()
            lines += process.stdout.readlines()
            return lines, process.stderr.read(), process.wait(timeout=60)

    loop = asyncio.get_running_loop()
    lines, err, status = await asyncio.to_thread(follow)
    assert lines == ["first\n", "line 2\n", "line 3\n", "line 4\n", "line 5\n"], err
    assert (status, err) == (3, "")


async def test_ctrl_c_leaves_the_command_and_rm_stops_all_it_started(
    manager: SandboxManager, state_dir: Path, purpose: str
) -> None:
    sandbox_id = await new_sandbox(manager, purpose)
    forever = "echo started; sleep 600 & setsid sleep 601 & sleep 602"
    command_id = await started(state_dir, sandbox_id, "--", "sh", "-c", forever)
    other = await started(state_dir, sandbox_id, "--", "sleep", "603")

    command = background_command(state_dir, "output", "--follow", sandbox_id, command_id)
    status, err = await interrupted(command, "started\n")
    assert status == 130
    assert err == (
        "interrupted: the command runs on ('jupyter sandbox background rm --owner=alice "
        f"{sandbox_id} {command_id}' stops it)\n"
    )
    found = await manager.background.get("alice", sandbox_id, command_id)
    assert found.exit_code is None  # still running
    listed = await background_cli(state_dir, "list", sandbox_id)
    assert [row.split()[:2] for row in listed.stdout.splitlines()[1:]] == [
        [command_id, "running"],
        [other, "running"],
    ]

    # A follower still following when the command is removed ends with the error, status 1.
    follower = await asyncio.create_subprocess_exec(
        *background_command(state_dir, "output", "-f", sandbox_id, command_id),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert follower.stdout is not None
    assert await asyncio.wait_for(follower.stdout.readline(), 60) == b"started\n"
    removed = await background_cli(state_dir, "rm", sandbox_id, command_id, other)
    assert (removed.returncode, removed.stdout) == (
        0,
        f"removed {command_id}\nremoved {other}\n",
    ), removed.stderr
    _, follower_err = await asyncio.wait_for(follower.communicate(), 60)
    assert follower.returncode == 1
    assert follower_err.decode() == (
        f"error: sandbox {sandbox_id} has no background command '{command_id}' "
        f"(GET /api/sandboxes/{sandbox_id}/commands lists them)\n"
    )
    left = await manager.exec("alice", sandbox_id, ["sh", "-c", PROCESSES])
    assert b"sleep 60" not in left.stdout, left.stdout
    listed = await background_cli(state_dir, "list", sandbox_id)
    assert (listed.returncode, len(listed.stdout.splitlines())) == (0, 1)  # the header only


async def test_unknown_sandboxes_commands_and_bad_arguments_are_clear_errors(
    manager: SandboxManager, state_dir: Path, purpose: str
) -> None:
    # Each case is a process of its own, and none changes anything: all at once.
    unknown_sandbox = [
        ("start", "0123456789ab", "--", "true"),
        ("list", "0123456789ab"),
        ("output", "0123456789ab", "5f3a9c0d1e2b"),
        ("rm", "0123456789ab", "5f3a9c0d1e2b"),
    ]
    for args, unknown in zip(unknown_sandbox, await many(state_dir, unknown_sandbox), strict=True):
        assert (unknown.returncode, unknown.stdout) == (1, ""), args
        assert unknown.stderr == "error: no sandbox 0123456789ab\n", (args, unknown.stderr)

    sandbox_id = await new_sandbox(manager, purpose)
    unknown_command = [
        ("output", sandbox_id, "5f3a9c0d1e2b"),
        ("output", "--follow", sandbox_id, "../../etc/passwd"),
        ("rm", sandbox_id, "5f3a9c0d1e2b"),
    ]
    for args, missing in zip(unknown_command, await many(state_dir, unknown_command), strict=True):
        assert (missing.returncode, missing.stdout) == (1, ""), args
        assert missing.stderr.startswith(
            f"error: sandbox {sandbox_id} has no background command '{args[-1]}'"
        ), missing.stderr

    usage = "usage: jupyter sandbox background"
    usages = {
        ("start", sandbox_id): f"{usage} start [--env NAME=VALUE]... [--cwd=PATH] SANDBOX_ID -- ",
        ("list",): f"{usage} list SANDBOX_ID",
        ("output", sandbox_id): f"{usage} output [--follow] SANDBOX_ID COMMAND_ID",
        ("rm", sandbox_id): f"{usage} rm SANDBOX_ID COMMAND_ID...",
        # Without --, the command's options are taken for the verb's (argparse says so).
        ("start", sandbox_id, "ls", "-la"): "error: argument -la: expected one argument",
    }
    for (args, says), wrong in zip(usages.items(), await many(state_dir, usages), strict=True):
        assert (wrong.returncode, wrong.stdout) == (2, ""), args
        assert says in wrong.stderr, (args, wrong.stderr)

    refusals = {
        "--env=NOVALUE": "--env takes NAME=VALUE, not 'NOVALUE': e.g. --env DEBUG=1",
        "--cwd=tmp": "cwd must be an absolute path in the sandbox",
    }
    bad_starts = [("start", bad, sandbox_id, "--", "true") for bad in refusals]
    for (bad, says), refused in zip(
        refusals.items(), await many(state_dir, bad_starts), strict=True
    ):
        assert (refused.returncode, refused.stdout) == (1, ""), bad
        assert refused.stderr.startswith(f"error: {says}"), (bad, refused.stderr)
    assert await manager.background.list("alice", sandbox_id) == []  # nothing was started


async def many(
    state_dir: Path, cases: Iterable[tuple[str, ...]]
) -> list[subprocess.CompletedProcess[str]]:
    """Each case (a verb and its arguments) run at once, their results in the same order."""
    return await asyncio.gather(*(background_cli(state_dir, *case) for case in cases))
