"""A background command's output followed as it comes (sandbox/operations/background_follow.py, through
BackgroundCommands.follow) against a real engine: every piece in order with its offsets, then
the exit code; from an offset; an ended command; the command or its sandbox gone while it is
followed; a follower that stops leaves the command running. The REST stream is tested in
tests/server_extension/test_background_commands.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from jupyter_sandbox.protocol.errors import CommandNotFoundError, InvalidRequestError
from jupyter_sandbox.sandbox.backends.base import ExecOptions
from jupyter_sandbox.sandbox.backends.records import ExecResult
from jupyter_sandbox.sandbox.manager import Sandbox, SandboxManager
from jupyter_sandbox.sandbox.operations import background_follow
from tests.sandbox.operations.test_background import ended, start

Event = tuple[str, dict[str, Any]]


@pytest.fixture
async def runc_sandbox(manager: SandboxManager, purpose: str) -> Sandbox:
    return await manager.create("alice", runtime="runc", purpose=purpose)


def follow(
    manager: SandboxManager, sandbox: Sandbox, command_id: str, offset: int = 0
) -> AsyncGenerator[Event, None]:
    return manager.background.follow("alice", sandbox.sandbox_id, command_id, offset)


async def rest(events: AsyncGenerator[Event, None]) -> list[Event]:
    """Every event still to come, to the last."""
    return [event async for event in events]


def assert_contiguous(events: list[Event], offset: int) -> str:
    """The output events' text, after checking each starts where the one before ended (the
    first at ``offset``) and covers its text's bytes."""
    for name, data in events:
        if name != "output":
            continue
        assert data["offset"] == offset, events
        assert data["next_offset"] == offset + len(data["text"].encode()), events
        offset = data["next_offset"]
    return "".join(data["text"] for name, data in events if name == "output")


async def test_output_is_followed_in_order_as_it_comes_then_the_exit_code(
    manager: SandboxManager, sandbox: Sandbox
) -> None:
    code = (
        "echo first; while [ ! -e /workspace/go ]; do sleep 0.05; done; "
        "for i in 2 3 4; do echo line $i é; sleep 0.2; done; exit 3"
    )
    command_id = await start(manager, sandbox, code)
    events = follow(manager, sandbox, command_id)
    # The first piece comes while the command still waits: followed, not read at its end.
    first = await anext(events)
    assert first == ("output", {"text": "first\n", "offset": 0, "next_offset": 6})
    await manager.exec("alice", sandbox.sandbox_id, ["touch", "/workspace/go"])
    went = time.monotonic()
    later = await rest(events)
    assert time.monotonic() - went > 0.4  # it was followed to the command's end
    text = assert_contiguous([first, *later], 0)
    assert text == "first\nline 2 é\nline 3 é\nline 4 é\n"
    assert len([name for name, _ in later if name == "output"]) > 1, later  # several pieces
    name, result = later[-1]
    assert (name, result["exit_code"], result["running"], result["id"]) == (
        "result",
        3,
        False,
        command_id,
    )


async def test_an_ended_command_is_followed_from_an_offset_to_its_end_at_once(
    manager: SandboxManager, runc_sandbox: Sandbox
) -> None:
    command_id = await start(manager, runc_sandbox, "printf 'hello wörld'; exit 2")
    await ended(manager, runc_sandbox, command_id)
    events = await rest(follow(manager, runc_sandbox, command_id, offset=6))
    assert events[0] == ("output", {"text": "wörld", "offset": 6, "next_offset": 12})
    assert [(name, data["exit_code"]) for name, data in events[1:]] == [("result", 2)]
    # From its end (or past it): nothing more to send, only how it ended.
    for offset in (12, 100):
        events = await rest(follow(manager, runc_sandbox, command_id, offset=offset))
        assert [(name, data.get("exit_code")) for name, data in events] == [("result", 2)]


async def test_what_fails_before_the_first_event_is_raised(
    manager: SandboxManager, runc_sandbox: Sandbox
) -> None:
    with pytest.raises(CommandNotFoundError, match="has no background command"):
        await anext(follow(manager, runc_sandbox, "0123456789ab"))
    command_id = await start(manager, runc_sandbox, "true")
    with pytest.raises(InvalidRequestError, match="offset must be 0 or more"):
        await anext(follow(manager, runc_sandbox, command_id, offset=-1))
    await manager.background.remove("alice", runc_sandbox.sandbox_id, command_id)


async def test_a_command_removed_while_followed_ends_it_with_an_error(
    manager: SandboxManager, runc_sandbox: Sandbox
) -> None:
    command_id = await start(manager, runc_sandbox, "echo started; sleep 600")
    events = follow(manager, runc_sandbox, command_id)
    assert (await anext(events))[1]["text"] == "started\n"
    await manager.background.remove("alice", runc_sandbox.sandbox_id, command_id)
    [(name, error)] = await rest(events)
    assert (name, error["code"]) == ("error", "command_not_found"), error


async def test_a_follower_that_reads_while_the_removal_is_under_way_hears_it_removed(
    manager: SandboxManager, runc_sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the kill and the record's end the follower reads on (at least every 0.5 s):
    it must hear that the command was removed, not that it ended, killed (CI: the Python
    client's follower ended as if the command had exited)."""
    command_id = await start(manager, runc_sandbox, "echo started; sleep 600")
    events = follow(manager, runc_sandbox, command_id)
    assert (await anext(events))[1]["text"] == "started\n"
    backend_exec = manager.backend.exec

    async def exec_after_a_pause_before_the_log_goes(
        sandbox_id: str, argv: list[str], options: ExecOptions
    ) -> ExecResult:
        if any('rm -f "$1"' in arg for arg in argv):  # killed: its log and record go next
            await asyncio.sleep(1.5)
        return await backend_exec(sandbox_id, argv, options)

    monkeypatch.setattr(manager.backend, "exec", exec_after_a_pause_before_the_log_goes)
    removal = asyncio.ensure_future(
        manager.background.remove("alice", runc_sandbox.sandbox_id, command_id)
    )
    [(name, error)] = await rest(events)
    await removal
    assert name == "error", error
    assert error["code"] == "command_not_found", error


async def test_a_sandbox_removed_while_followed_ends_it_with_an_error(
    manager: SandboxManager, runc_sandbox: Sandbox
) -> None:
    command_id = await start(manager, runc_sandbox, "echo started; sleep 600")
    events = follow(manager, runc_sandbox, command_id)
    assert (await anext(events))[1]["text"] == "started\n"
    await manager.remove("alice", runc_sandbox.sandbox_id)
    [(name, error)] = await rest(events)
    assert (name, error["code"]) == ("error", "sandbox_not_found"), error


async def test_a_follower_that_stops_leaves_the_command_and_a_silent_one_hears_a_heartbeat(
    manager: SandboxManager, runc_sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(background_follow, "HEARTBEAT", 0.3)
    command_id = await start(manager, runc_sandbox, "printf ab; sleep 600")
    events = follow(manager, runc_sandbox, command_id)
    assert await anext(events) == ("output", {"text": "ab", "offset": 0, "next_offset": 2})
    # Silent now: an empty piece, where the next will start, keeps the stream alive.
    assert await anext(events) == ("output", {"text": "", "offset": 2, "next_offset": 2})
    await events.aclose()
    found = await manager.background.get("alice", runc_sandbox.sandbox_id, command_id)
    assert found.running
    await manager.background.remove("alice", runc_sandbox.sandbox_id, command_id)
