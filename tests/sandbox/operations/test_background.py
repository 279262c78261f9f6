"""Background commands (sandbox/operations/background.py) against a real engine: started and left
running, their output read piece by piece, their exit status, and their removal, which stops
everything they started. The REST routes are tested in
tests/server_extension/test_background_commands.py."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from jupyter_sandbox.protocol.errors import (
    CommandNotFoundError,
    InvalidRequestError,
    ProcessNotFoundError,
    SandboxConflictError,
    SandboxNotFoundError,
    TooManyCommandsError,
)
from jupyter_sandbox.sandbox.backends.base import ExecOptions
from jupyter_sandbox.sandbox.manager import Sandbox, SandboxManager
from jupyter_sandbox.sandbox.operations.background import LOG_DIR, BackgroundCommand
from jupyter_sandbox.sandbox.operations.commands import CommandRequest


def request(command: str | list[str], **fields: object) -> CommandRequest:
    return CommandRequest.from_json({"command": command, **fields})


async def start(manager: SandboxManager, sandbox: Sandbox, command: str, **fields: object) -> str:
    started = await manager.background.start(
        "alice", sandbox.sandbox_id, request(command, **fields)
    )
    return started.command_id


async def until(check: Callable[[], Awaitable[bool]], seconds: float = 30.0) -> None:
    for _ in range(int(seconds / 0.1)):
        if await check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the condition never held")


async def ended(manager: SandboxManager, sandbox: Sandbox, command_id: str) -> BackgroundCommand:
    async def done() -> bool:
        found = await manager.background.get("alice", sandbox.sandbox_id, command_id)
        return not found.running

    await until(done)
    return await manager.background.get("alice", sandbox.sandbox_id, command_id)


@pytest.fixture
async def runc_sandbox(manager: SandboxManager, purpose: str) -> Sandbox:
    return await manager.create("alice", runtime="runc", purpose=purpose)


async def test_a_background_command_runs_on_and_its_output_is_read_in_pieces(
    manager: SandboxManager, sandbox: Sandbox
) -> None:
    code = 'echo one; echo two >&2; read line < /workspace/go; echo "$GREETING é"; exit 3'
    await manager.exec("alice", sandbox.sandbox_id, ["mkfifo", "/workspace/go"])
    command_id = await start(manager, sandbox, code, env={"GREETING": "hello"})
    background = manager.background

    async def printed_two() -> bool:
        out = await background.output("alice", sandbox.sandbox_id, command_id)
        return out.text == "one\ntwo\n"

    await until(printed_two)  # the request returned while the command waits on the fifo
    first = await background.output("alice", sandbox.sandbox_id, command_id)
    assert first.running
    assert (first.offset, first.next_offset, first.size) == (0, 8, 8)
    [listed] = await background.list("alice", sandbox.sandbox_id)
    assert listed.as_dict()["running"]
    assert listed.argv == ["/bin/sh", "-c", code]
    assert listed.cwd == "/workspace"
    await manager.exec("alice", sandbox.sandbox_id, ["sh", "-c", "echo go > /workspace/go"])
    finished = await ended(manager, sandbox, command_id)
    assert finished.exit_code == 3
    rest = await background.output("alice", sandbox.sandbox_id, command_id, first.next_offset)
    assert (rest.text, rest.running, rest.next_offset) == ("hello é\n", False, 17)


async def test_a_character_cut_by_the_limit_comes_whole_with_the_next_read(
    manager: SandboxManager, runc_sandbox: Sandbox
) -> None:
    command_id = await start(manager, runc_sandbox, "printf 'aé'")
    await ended(manager, runc_sandbox, command_id)
    background = manager.background
    cut = await background.output("alice", runc_sandbox.sandbox_id, command_id, limit=2)
    assert (cut.text, cut.next_offset, cut.size) == ("a", 1, 3)
    whole = await background.output("alice", runc_sandbox.sandbox_id, command_id, cut.next_offset)
    assert (whole.text, whole.next_offset) == ("é", 3)


async def test_an_ended_commands_last_cut_character_is_replaced_not_kept_back(
    manager: SandboxManager, runc_sandbox: Sandbox
) -> None:
    command_id = await start(manager, runc_sandbox, "printf 'ab\\342\\202'")
    await ended(manager, runc_sandbox, command_id)
    out = await manager.background.output("alice", runc_sandbox.sandbox_id, command_id)
    assert (out.text, out.next_offset, out.size) == ("ab\ufffd", 4, 4)


async def test_a_missing_directory_is_reported_in_the_output(
    manager: SandboxManager, runc_sandbox: Sandbox
) -> None:
    command_id = await start(manager, runc_sandbox, "pwd", cwd="/no/such/dir")
    assert (await ended(manager, runc_sandbox, command_id)).exit_code == 127
    out = await manager.background.output("alice", runc_sandbox.sandbox_id, command_id)
    assert "can't cd to /no/such/dir" in out.text


async def test_removing_a_command_stops_all_it_started_and_forgets_it(
    manager: SandboxManager, sandbox: Sandbox
) -> None:
    command_id = await start(manager, sandbox, "sleep 600 & setsid sleep 601 & sleep 602")
    # The image has no ps: the command lines of every process, one per line, from /proc.
    processes = "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done 2>/dev/null"
    stray = f"{processes} | grep -c '^sleep 60[012]' || true"

    async def all_started() -> bool:
        counted = await manager.exec("alice", sandbox.sandbox_id, ["sh", "-c", stray])
        return counted.stdout.strip() == b"3"

    await until(all_started)
    await manager.background.remove("alice", sandbox.sandbox_id, command_id)
    left = await manager.exec("alice", sandbox.sandbox_id, ["sh", "-c", processes])
    assert b"sleep 60" not in left.stdout
    logs = await manager.exec("alice", sandbox.sandbox_id, ["ls", "/tmp/.jupyter-sandbox-commands"])
    assert logs.stdout == b""
    assert await manager.background.list("alice", sandbox.sandbox_id) == []
    with pytest.raises(CommandNotFoundError, match="has no background command"):
        await manager.background.get("alice", sandbox.sandbox_id, command_id)


async def test_commands_survive_a_restart_of_the_interpreter(
    manager: SandboxManager, runc_sandbox: Sandbox
) -> None:
    command_id = await start(manager, runc_sandbox, "sleep 600")
    await manager.restart_kernel("alice", runc_sandbox.sandbox_id)
    found = await manager.background.get("alice", runc_sandbox.sandbox_id, command_id)
    assert found.exit_code is None
    await manager.background.remove("alice", runc_sandbox.sandbox_id, command_id)


async def test_what_cannot_be_done_is_refused_with_the_fix(
    manager: SandboxManager, runc_sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    background = manager.background
    sandbox_id = runc_sandbox.sandbox_id
    with pytest.raises(InvalidRequestError, match="takes no stdin"):
        await background.start("alice", sandbox_id, request("cat", stdin="x"))
    with pytest.raises(SandboxNotFoundError):
        await background.start("bob", sandbox_id, request("true"))
    with pytest.raises(CommandNotFoundError):
        await background.output("alice", sandbox_id, "../../etc/passwd")
    with pytest.raises(InvalidRequestError, match="offset must be 0 or more"):
        await background.output("alice", sandbox_id, "0" * 12, offset=-1)
    monkeypatch.setattr(background, "max_per_sandbox", 1)
    command_id = await start(manager, runc_sandbox, "sleep 600")
    with pytest.raises(TooManyCommandsError, match="remove ended ones first"):
        await start(manager, runc_sandbox, "true")
    with pytest.raises(SandboxNotFoundError):
        await background.remove("bob", sandbox_id, command_id)
    await manager.pause("alice", sandbox_id)
    with pytest.raises(SandboxConflictError, match="resume it"):
        await background.remove("alice", sandbox_id, command_id)
    await manager.resume("alice", sandbox_id)
    await background.remove("alice", sandbox_id, command_id)


async def test_how_a_command_ended_is_known_after_the_engine_forgets_its_exec(
    manager: SandboxManager, runc_sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Docker forgets an ended exec about five minutes later (and all of them when it
    restarts): the exit status seen once is kept, and one never seen is read from the file
    the command's shell wrote in the sandbox."""
    background = manager.background
    sandbox_id = runc_sandbox.sandbox_id
    seen = await start(manager, runc_sandbox, "exit 4")
    unseen = await start(manager, runc_sandbox, "sleep 0.5; exit 5")
    assert (await ended(manager, runc_sandbox, seen)).exit_code == 4

    async def forgotten(spawn_id: str) -> int | None:
        raise ProcessNotFoundError(f"the engine no longer knows process {spawn_id}")

    monkeypatch.setattr(manager.backend, "spawned_exit_code", forgotten)
    assert (await background.get("alice", sandbox_id, seen)).exit_code == 4  # kept
    await asyncio.sleep(1.0)  # the second ends meanwhile, never seen running to its end
    found = await background.get("alice", sandbox_id, unseen)
    assert (found.running, found.exit_code) == (False, 5)
    listed = {c.command_id: c.exit_code for c in await background.list("alice", sandbox_id)}
    assert listed == {seen: 4, unseen: 5}


# Python expressions of what the sandbox writes there (a MiB does not fit in argv).
@pytest.mark.parametrize("status", ["'9' * 5000", "'9' * 2**20", "'300'", "'\\u0665'", "'x'"])
async def test_a_status_file_the_sandbox_overwrote_is_no_exit_status(
    manager: SandboxManager, runc_sandbox: Sandbox, status: str
) -> None:
    """The status file, read when the engine forgot the command's exec, is the sandbox's to
    write: 5000 digits made int() raise ValueError (a 500 from the commands API), and a long
    file was read whole onto the host."""
    sandbox_id = runc_sandbox.sandbox_id
    command_id = await start(manager, runc_sandbox, "exit 5")
    assert (await ended(manager, runc_sandbox, command_id)).exit_code == 5
    assert await manager.background._status_file(sandbox_id, command_id) == 5
    status_file = f"{LOG_DIR}/{command_id}.log.status"
    write = f"open({status_file!r}, 'w').write({status})"
    result = await manager.exec(
        "alice", sandbox_id, ["python3", "-c", write], ExecOptions(timeout=30)
    )
    assert result.exit_code == 0, result.stderr
    assert await manager.background._status_file(sandbox_id, command_id) is None


async def test_two_starts_at_once_cannot_both_pass_the_cap(
    manager: SandboxManager, runc_sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(manager.background, "max_per_sandbox", 1)
    results = await asyncio.gather(
        start(manager, runc_sandbox, "sleep 600"),
        start(manager, runc_sandbox, "sleep 601"),
        return_exceptions=True,
    )
    assert sorted(type(r).__name__ for r in results) == ["TooManyCommandsError", "str"]
    [kept] = await manager.background.list("alice", runc_sandbox.sandbox_id)
    assert kept.running
    await manager.background.remove("alice", runc_sandbox.sandbox_id, kept.command_id)
