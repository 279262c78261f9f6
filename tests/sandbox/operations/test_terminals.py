"""Terminals in real sandboxes on both runtimes (SandboxManager.open_terminal, the Docker
backend's TTY exec): what the shell is, its size, its output, and that closing it ends
everything it started. One sandbox per runtime is shared by the module; the WebSocket that
carries a terminal to JupyterLab is tested in tests/server_extension/test_terminals.py."""

from __future__ import annotations

import asyncio
import datetime
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from jupyter_sandbox.protocol.errors import (
    InvalidRequestError,
    SandboxConflictError,
    SandboxNotFoundError,
    TooManyTerminalsError,
)
from jupyter_sandbox.sandbox.backends.base import Terminal
from jupyter_sandbox.sandbox.manager import Sandbox, SandboxManager
from jupyter_sandbox.sandbox.operations import terminals
from tests.conftest import (
    BOTH_RUNTIMES,
    manager_config,
    purpose_label,
    remove_everything_under,
    remove_state_dir,
    scratch_manager,
)

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]
OWNER = "alice"
# The command line of every process in the sandbox (it has no ps or pgrep), one a line.
PROCESSES = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def term_manager() -> AsyncIterator[SandboxManager]:
    async with scratch_manager() as manager:
        yield manager


@pytest.fixture(scope="module", params=BOTH_RUNTIMES)
def runtime(request: pytest.FixtureRequest) -> str:
    """Module-scoped here: one sandbox per runtime."""
    return str(request.param)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def box(term_manager: SandboxManager, runtime: str) -> AsyncIterator[Sandbox]:
    sandbox = await term_manager.create(
        OWNER, runtime=runtime, purpose=purpose_label(f"{__name__}[{runtime}]")
    )
    try:
        yield sandbox
    finally:
        await term_manager.remove(OWNER, sandbox.sandbox_id)


async def read_until(terminal: Terminal, text: bytes, timeout: float = 30) -> bytes:
    """The terminal's output up to and including ``text``."""
    seen = b""
    deadline = time.monotonic() + timeout
    while text not in seen:
        piece = await asyncio.wait_for(terminal.read(), max(deadline - time.monotonic(), 0.01))
        assert piece, f"the output ended before {text!r}: {seen!r}"
        seen += piece
    return seen


async def run(terminal: Terminal, line: str) -> str:
    """Type ``line`` and Enter; what it printed. It is framed by two markers the shell
    computes, so that the TTY's echo of the line (wrapped where the screen ends) is never
    taken for its output."""
    token = uuid.uuid4().hex[:8]
    await terminal.write(f"echo B{token}-$((6*7)); {line}; echo E{token}-$((6*7))\r".encode())
    seen = await read_until(terminal, f"E{token}-42".encode())
    framed = seen.split(f"B{token}-42\r\n".encode(), 1)[1]
    return framed.rsplit(f"E{token}-42".encode(), 1)[0].decode()


async def processes(manager: SandboxManager, sandbox_id: str) -> list[str]:
    ran = await manager.exec(OWNER, sandbox_id, ["sh", "-c", PROCESSES])
    lines = [line.strip() for line in ran.stdout.decode().splitlines()]
    found = [line for line in lines if line and PROCESSES not in line]
    assert any("sandbox-init" in line for line in found), found  # the listing works
    return found


async def test_the_shell_is_the_sandbox_users_with_its_size_and_utf8(
    term_manager: SandboxManager, box: Sandbox
) -> None:
    terminal = await term_manager.open_terminal(OWNER, box.sandbox_id, rows=30, cols=100)
    try:
        said = await run(terminal, "stty size; id -u; pwd; echo $TERM; command -v python")
        assert said.split() == [
            "30",
            "100",
            "10001",
            "/workspace",
            "xterm-256color",
            "/opt/sandbox/bin/python",  # the sandbox's PATH, as its commands and kernel have
        ], said
        await terminal.resize(50, 132)
        assert (await run(terminal, "stty size")).split() == ["50", "132"]
        # Bytes as the TTY has them: UTF-8 passes whole, whatever the reads cut it into.
        said = await run(terminal, "printf '\\303\\251\\342\\202\\254\\360\\237\\230\\200\\n'")
        assert said.encode() == "é€😀\r\n".encode()
        with pytest.raises(InvalidRequestError, match="cols must be a whole number"):
            await terminal.resize(10, 1001)
    finally:
        await terminal.close()
    assert term_manager.terminals.open_count(box.sandbox_id) == 0


async def test_close_kills_the_shell_and_everything_it_started(
    term_manager: SandboxManager, box: Sandbox
) -> None:
    terminal = await term_manager.open_terminal(OWNER, box.sandbox_id)
    try:
        jobs = "sleep 1001 & nohup sleep 1002 >/dev/null 2>&1 & setsid sleep 1003 & echo started"
        assert "started" in await run(terminal, jobs)
        # All three run (the listing may come before the last one has started), so that their
        # absence below means something.
        for _ in range(50):
            found = await processes(term_manager, box.sandbox_id)
            if {"sleep 1001", "sleep 1002", "sleep 1003"} <= set(found):
                break
            await asyncio.sleep(0.1)
        assert {"sleep 1001", "sleep 1002", "sleep 1003"} <= set(found), found
        assert any(line.startswith("/bin/bash -i") for line in found), found
    finally:
        started = time.monotonic()
        await terminal.close()
        took = time.monotonic() - started
    assert await asyncio.wait_for(terminal.read(), 5) == b""  # the output has ended
    found = await processes(term_manager, box.sandbox_id)
    assert not [line for line in found if "sleep 100" in line or "bash -i" in line], found
    await terminal.close()  # again: nothing to do, no error
    await terminal.write(b"echo too late\r")  # dropped
    assert took < 10, took


async def test_closed_while_paused_what_it_started_goes_once_resumed(
    term_manager: SandboxManager, box: Sandbox
) -> None:
    terminal = await term_manager.open_terminal(OWNER, box.sandbox_id)
    try:
        assert "started" in await run(terminal, "sleep 1004 & echo started")
        for _ in range(50):
            if "sleep 1004" in await processes(term_manager, box.sandbox_id):
                break
            await asyncio.sleep(0.1)
        await term_manager.pause(OWNER, box.sandbox_id)
    finally:
        await terminal.close()  # frozen: nothing can be killed yet
    await term_manager.resume(OWNER, box.sandbox_id)
    for _ in range(100):
        found = await processes(term_manager, box.sandbox_id)
        if not [line for line in found if "sleep 1004" in line or "bash -i" in line]:
            break
        await asyncio.sleep(0.1)
    assert not [line for line in found if "sleep 1004" in line or "bash -i" in line], found


async def test_a_reader_that_falls_behind_holds_the_shell_back(
    term_manager: SandboxManager, box: Sandbox
) -> None:
    """Output is read only as fast as the reader takes it: the server buffers a bounded
    amount (READ_AHEAD, and the engine's and the kernel's buffers), never the flood."""
    size = 8 * 1024**2
    flag = f"/tmp/flooded-{uuid.uuid4().hex[:8]}"
    terminal = await term_manager.open_terminal(OWNER, box.sandbox_id)
    try:
        await run(terminal, "true")
        flood = f"head -c {size} /dev/zero | tr '\\0' a; touch {flag}; echo F-$((6*7))\r"
        await terminal.write(flood.encode())
        await asyncio.sleep(2)  # nothing read meanwhile
        check = ["sh", "-c", f"test -e {flag} && echo finished || echo held"]
        assert (await term_manager.exec(OWNER, box.sandbox_id, check)).stdout == b"held\n"
        received, tail = 0, b""
        while b"F-42" not in tail:
            piece = await asyncio.wait_for(terminal.read(), 30)
            assert piece, tail
            received += piece.count(b"a")
            tail = (tail + piece)[-64:]
        assert received >= size  # all of it, once read (and the echoed line's own a's)
        assert (await term_manager.exec(OWNER, box.sandbox_id, check)).stdout == b"finished\n"
    finally:
        await terminal.close()


async def test_exit_ends_the_output_and_close_still_ends_what_it_left(
    term_manager: SandboxManager, box: Sandbox
) -> None:
    terminal = await term_manager.open_terminal(OWNER, box.sandbox_id)
    try:
        await run(terminal, "nohup sleep 1004 >/dev/null 2>&1 & true")
        await terminal.write(b"exit\r")
        seen = b""
        while piece := await asyncio.wait_for(terminal.read(), 20):
            seen += piece
        assert b"exit" in seen
        assert term_manager.terminals.open_count(box.sandbox_id) == 1  # until it is closed
        await terminal.resize(30, 90)  # of an ended shell: nothing to do
    finally:
        await terminal.close()
    assert term_manager.terminals.open_count(box.sandbox_id) == 0
    found = await processes(term_manager, box.sandbox_id)
    assert not [line for line in found if "sleep 1004" in line], found


async def test_owner_state_and_the_cap_decide_who_opens_one(
    term_manager: SandboxManager, box: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(SandboxNotFoundError):
        await term_manager.open_terminal("bob", box.sandbox_id)
    with pytest.raises(InvalidRequestError, match="rows must be a whole number"):
        await term_manager.open_terminal(OWNER, box.sandbox_id, rows=0)

    monkeypatch.setattr(term_manager.terminals, "max_per_sandbox", 2)
    opened = [await term_manager.open_terminal(OWNER, box.sandbox_id) for _ in range(2)]
    try:
        with pytest.raises(TooManyTerminalsError) as refused:
            await term_manager.open_terminal(OWNER, box.sandbox_id)
        assert "already has 2 terminal(s) open" in refused.value.message
        assert "c.SandboxTerminals.max_per_sandbox (2)" in refused.value.message
        assert refused.value.http_status == 429
        await opened.pop().close()
        opened.append(await term_manager.open_terminal(OWNER, box.sandbox_id))  # room again
    finally:
        for terminal in opened:
            await terminal.close()
    monkeypatch.setattr(term_manager.terminals, "max_per_sandbox", 0)
    with pytest.raises(TooManyTerminalsError, match="terminals are turned off"):
        await term_manager.open_terminal(OWNER, box.sandbox_id)
    monkeypatch.undo()

    await term_manager.pause(OWNER, box.sandbox_id)
    try:
        with pytest.raises(SandboxConflictError, match="is paused: resume it first"):
            await term_manager.open_terminal(OWNER, box.sandbox_id)
    finally:
        await term_manager.resume(OWNER, box.sandbox_id)
    assert term_manager.terminals.open_count(box.sandbox_id) == 0


async def test_typing_and_output_count_as_activity(
    term_manager: SandboxManager, box: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    long_ago = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc).isoformat()
    term_manager.update_state(box.sandbox_id, last_activity=long_ago)
    terminal = await term_manager.open_terminal(OWNER, box.sandbox_id)
    try:
        opened = term_manager.read_state(box.sandbox_id)["last_activity"]
        assert opened > long_ago  # opening is activity
        term_manager.update_state(box.sandbox_id, last_activity=long_ago)
        await run(terminal, "true")  # within ACTIVITY_SECONDS of the open: not recorded again
        assert term_manager.read_state(box.sandbox_id)["last_activity"] == long_ago
        monkeypatch.setattr(terminals, "ACTIVITY_SECONDS", 0.0)
        await run(terminal, "true")
        assert term_manager.read_state(box.sandbox_id)["last_activity"] > long_ago
        # Output alone, nobody typing: a job printing as it works.
        await terminal.write(b"sleep 1; echo la''te\r")
        await read_until(terminal, b"la''te")  # the TTY's echo of the line
        term_manager.update_state(box.sandbox_id, last_activity=long_ago)
        await read_until(terminal, b"late")
        assert term_manager.read_state(box.sandbox_id)["last_activity"] > long_ago
    finally:
        await terminal.close()


async def test_the_output_ends_when_the_sandbox_goes(
    term_manager: SandboxManager, box: Sandbox
) -> None:
    """The module's last test: it removes the shared sandbox."""
    terminal = await term_manager.open_terminal(OWNER, box.sandbox_id)
    try:
        await run(terminal, "true")
        await term_manager.remove(OWNER, box.sandbox_id)
        while await asyncio.wait_for(terminal.read(), 20):
            pass
    finally:
        started = time.monotonic()
        await terminal.close()
    assert time.monotonic() - started < 5
    assert term_manager.terminals.open_count(box.sandbox_id) == 0


async def test_closing_the_manager_closes_its_terminals() -> None:
    """What the server does when it stops (SandboxExtension.stop_extension); the manager's
    bookkeeping, the same for both runtimes: runc only."""
    state_dir = Path(tempfile.mkdtemp(prefix="jsbx-", dir="/tmp"))
    manager = SandboxManager.from_config(manager_config(state_dir))
    checker = SandboxManager.from_config(manager_config(state_dir))
    try:
        sandbox = await manager.create(OWNER, runtime="runc", purpose=purpose_label(__name__))
        terminal = await manager.open_terminal(OWNER, sandbox.sandbox_id)
        await run(terminal, "sleep 1005 & true")
        await manager.close()
        assert await asyncio.wait_for(terminal.read(), 5) == b""
        found = await processes(checker, sandbox.sandbox_id)
        assert not [line for line in found if "sleep 1005" in line or "bash -i" in line], found
    finally:
        await remove_everything_under(checker, state_dir)
        await checker.close()
        await manager.close()
        remove_state_dir(state_dir)
