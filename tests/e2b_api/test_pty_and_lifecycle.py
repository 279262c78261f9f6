"""E2B's PTY (e2b_api/pty_service.py, on the core's terminals) and autoPause/autoResume (the
culler pauses such a sandbox at its timeout, its next data-plane request resumes it): the
parsing and the culler's and reaper's rules without an engine, then the real E2B SDK against a
real server, on both runtimes."""

from __future__ import annotations

import asyncio
import datetime
import time
from pathlib import Path
from typing import Any

import pytest
from e2b import CommandExitException, PtySize
from e2b_code_interpreter import AsyncSandbox

from jupyter_sandbox.e2b_api.connect_protocol import Message
from jupyter_sandbox.e2b_api.errors import E2BUnsupportedError
from jupyter_sandbox.e2b_api.pty_service import pty_request, wants_pty
from jupyter_sandbox.protocol.errors import InvalidRequestError
from jupyter_sandbox.sandbox.lifecycle.culler import SandboxCuller
from jupyter_sandbox.sandbox.lifecycle.reaper import past_its_timeout
from jupyter_sandbox.sandbox.programs.exec_marks import EXEC_MARK
from jupyter_sandbox.server_extension import SandboxExtension
from tests.e2b_api.conftest import e2b_server_config
from tests.e2b_api.test_code_interpreter import SHOW_PROCESSES

NOW = datetime.datetime.now(datetime.timezone.utc)


def ago(seconds: float) -> str:
    return (NOW - datetime.timedelta(seconds=seconds)).isoformat()


def start(**fields: Any) -> Message:
    process = {"cmd": "/bin/bash", "args": ["-i", "-l"], **fields.pop("process", {})}
    return Message({"process": process, "pty": {"size": {"rows": 30, "cols": 100}}, **fields}, "S")


# -- without an engine --------------------------------------------------------------------------


def test_a_pty_is_the_sandboxs_shell_with_the_size_cwd_and_variables_asked_for() -> None:
    assert wants_pty({"pty": {"size": {}}})
    assert not wants_pty({"process": {}})
    request = pty_request(
        start(process={"cwd": "/home/user/project", "envs": {"LANG": "C.UTF-8"}}, tag="t"), "5000"
    )
    assert (request.rows, request.cols, request.cwd) == (30, 100, "/workspace/project")
    assert (request.env, request.timeout, request.tag) == ({"LANG": "C.UTF-8"}, 5.0, "t")


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"process": {"cmd": "/bin/sh"}}, E2BUnsupportedError),
        ({"process": {"args": ["-c", "id"]}}, E2BUnsupportedError),
        ({"process": {"envs": {EXEC_MARK: "x"}}}, InvalidRequestError),
        ({"process": {"envs": {"BAD NAME": "x"}}}, InvalidRequestError),
        ({"process": {"cwd": "relative"}}, InvalidRequestError),
        ({"stdin": True}, E2BUnsupportedError),
        ({"unknown": 1}, InvalidRequestError),
    ],
)
def test_what_a_pty_cannot_honour_is_refused(
    fields: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        pty_request(start(**fields), None)


def test_a_pty_size_is_bounded() -> None:
    message = Message(
        {"process": {"cmd": "/bin/bash"}, "pty": {"size": {"rows": 5000, "cols": 80}}}, "S"
    )
    with pytest.raises(InvalidRequestError, match="rows"):
        pty_request(message, None)


def lifecycle_state(**fields: Any) -> dict[str, Any]:
    return {"owner": "alice", "created": ago(100), "last_activity": ago(100), **fields}


def test_the_culler_pauses_at_the_timeout_and_keeps_it_until_its_ttl(manager: Any) -> None:
    culler = SandboxCuller(manager, idle_timeout=50.0, ttl=1000.0)
    due = lifecycle_state(timeout_action="pause", expires=ago(1), last_activity=ago(2))
    assert culler.pause_due(due, NOW)
    assert culler.reason_to_cull(due, NOW) is None  # its timeout is not a reason to remove it
    assert not culler.pause_due(lifecycle_state(timeout_action="pause", expires=ago(-60)), NOW)
    assert not culler.pause_due(lifecycle_state(expires=ago(1)), NOW)  # E2B's default: kill
    assert "past its timeout" in str(culler.reason_to_cull(lifecycle_state(expires=ago(1)), NOW))
    paused = lifecycle_state(timeout_action="pause", expires=None, paused_at_timeout=ago(90))
    assert not culler.pause_due(paused, NOW)
    assert culler.reason_to_cull(paused, NOW) is None  # idle for 100 s, yet waiting: kept
    old = {**paused, "created": ago(2000)}
    assert "time to live" in str(culler.reason_to_cull(old, NOW))


def test_without_a_server_a_sandbox_to_pause_is_no_orphan(state_dir: Path) -> None:
    assert (
        past_its_timeout(state_dir, lifecycle_state(timeout_action="pause", expires=ago(1))) is None
    )
    assert past_its_timeout(state_dir, lifecycle_state(expires=ago(1))) is not None


# -- with the real E2B SDK and a real server ----------------------------------------------------


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any], runtime: str) -> dict[str, Any]:
    return e2b_server_config(jp_server_config, runtime)


async def until(predicate: Any, what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not await predicate():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.1)


@pytest.mark.integration
async def test_a_pty_round_trip(e2b_env: str) -> None:
    sandbox = await AsyncSandbox.create()
    try:
        chunks: list[bytes] = []

        async def shown(text: bytes) -> bool:
            return text in b"".join(chunks)

        handle = await sandbox.pty.create(
            PtySize(rows=24, cols=80), on_data=chunks.append, cwd="/home/user", envs={"G": "hi"}
        )
        assert handle.pid in [process.pid for process in await sandbox.commands.list()]
        await sandbox.pty.send_stdin(handle.pid, b"echo $G:$PWD:$((6*7)):$(id -u)\n")
        await until(lambda: shown(b"hi:/workspace:42:"), "the PTY never echoed the command")
        assert b":0\r\n" not in b"".join(chunks)  # the sandbox's user, never root
        await sandbox.pty.resize(handle.pid, PtySize(rows=33, cols=111))
        await sandbox.pty.send_stdin(handle.pid, b"stty size\n")
        await until(lambda: shown(b"33 111"), "the PTY's new size was not seen")
        await sandbox.pty.send_stdin(handle.pid, b"exit 0\n")
        result = await asyncio.wait_for(handle.wait(), 30)
        assert result.exit_code == 0

        async def sleeping() -> bool:
            shown = await sandbox.commands.run(SHOW_PROCESSES)
            return "sleep 600" in shown.stdout

        async def not_sleeping() -> bool:
            return not await sleeping()

        killed = await sandbox.pty.create(PtySize(rows=24, cols=80), on_data=chunks.append)
        await sandbox.pty.send_stdin(killed.pid, b"sleep 600 &\n")
        await until(sleeping, "the PTY's background job never started")
        assert await sandbox.pty.kill(killed.pid)
        with pytest.raises(Exception):  # noqa: B017, PT011  (the SDK's error of a killed stream)
            await asyncio.wait_for(killed.wait(), 30)
        await until(not_sleeping, "killing the PTY left its background job running")
    finally:
        await sandbox.kill()


@pytest.mark.integration
async def test_auto_pause_at_the_timeout_and_resume_by_the_next_request(
    e2b_env: str, extension: SandboxExtension
) -> None:
    manager = extension.manager
    pausing = await AsyncSandbox.create(
        timeout=4, lifecycle={"on_timeout": "pause", "auto_resume": True}
    )
    killed = await AsyncSandbox.create(timeout=4)  # E2B's default: removed at its timeout
    try:
        assert (await pausing.commands.run("echo kept > kept")).exit_code == 0
        sandbox_id = pausing.sandbox_id

        async def paused_and_the_other_gone() -> bool:
            await extension.culler.cull_once()
            listed = await manager.list_sandboxes("alice")
            return [(info.sandbox_id, info.status) for info in listed] == [(sandbox_id, "paused")]

        await until(paused_and_the_other_gone, "not paused (and the other removed) at the timeout")
        state = manager.read_state(sandbox_id)
        assert state["paused_at_timeout"]
        assert state["expires"] is None
        await extension.culler.cull_once()  # paused so, it stays
        assert (await manager.get("alice", sandbox_id)).status == "paused"

        result = await pausing.commands.run("cat kept")  # resumes it
        assert result.stdout == "kept\n"
        assert (await manager.get("alice", sandbox_id)).status == "running"
        state = manager.read_state(sandbox_id)
        assert state["paused_at_timeout"] is None
        assert state["expires"] is not None  # its timeout again
    finally:
        await pausing.kill()
        await killed.kill()


@pytest.mark.integration
async def test_what_the_sdk_cannot_get_is_refused_clearly(e2b_env: str) -> None:
    sandbox = await AsyncSandbox.create()
    try:
        with pytest.raises(CommandExitException):
            await sandbox.commands.run("exit 2")
        with pytest.raises(Exception, match="filesystem-only"):
            await AsyncSandbox.create(
                lifecycle={"on_timeout": {"action": "pause", "mode": "filesystem"}}
            )
    finally:
        await sandbox.kill()
