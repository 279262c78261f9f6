"""envd's process service beyond Start (e2b_api/process_service.py): Connect with several
followers, SendInput and Update refused for a command, and the OpenAI Agents SDK's helper
scripts run through /bin/sh (e2b_api/agents_helpers.py). The parsing and the rewrite's pattern
without an engine; the rest with the real E2B SDK against a real server, on both runtimes, and
the two security rows of this part (114, 115) as raw requests."""

from __future__ import annotations

import asyncio
import base64
import json
import shlex
import time
from collections.abc import Callable
from typing import Any

import pytest
from e2b import CommandExitException, InvalidArgumentException
from e2b_code_interpreter import Sandbox

from jupyter_sandbox.e2b_api import agents_helpers
from jupyter_sandbox.e2b_api.connect_protocol import Message
from jupyter_sandbox.e2b_api.errors import E2BUnsupportedError
from jupyter_sandbox.e2b_api.process_service import (
    EVENT_OVERHEAD,
    FOLLOWER_BYTES,
    FOLLOWER_QUEUE,
    Processes,
    Running,
    connect_events,
    send_input,
    start_request,
    update,
)
from jupyter_sandbox.protocol.errors import InvalidRequestError, ProcessNotFoundError, SandboxError
from tests.e2b_api.conftest import e2b_server_config
from tests.e2b_api.test_hostile_input import START, create, envelope, frames, send

HELPER = "/tmp/openai-agents/bin/resolve-workspace-path-0123456789ab"
SDK_HELPER_CALL = shlex.join([HELPER, "/workspace", "/workspace/it's here.txt", "0"])


# -- the helper scripts' rewrite (no engine) ----------------------------------------------------


def test_the_sdks_helper_command_is_run_through_sh() -> None:
    argv = ["/bin/bash", "-l", "-c", SDK_HELPER_CALL]
    assert agents_helpers.rewritten(argv) == ["/bin/bash", "-l", "-c", f"/bin/sh {SDK_HELPER_CALL}"]
    bare = ["/bin/bash", "-l", "-c", HELPER]
    assert agents_helpers.rewritten(bare)[3] == f"/bin/sh {HELPER}"


@pytest.mark.parametrize(
    "command",
    [
        f"{HELPER}; id",
        f"{HELPER} && id",
        f"{HELPER} | sh",
        f"{HELPER} $(id)",
        f"{HELPER} `id`",
        f"{HELPER} >/workspace/out",
        f'{HELPER} "$HOME"',
        f"{HELPER}\nid",
        f"{HELPER} '/a' x;id",
        "/tmp/openai-agents/bin/../../../bin/evil-0123456789ab",
        "/tmp/openai-agents/bin/sub/dir-0123456789ab",
        "/tmp/openai-agents/bin/name-0123456789a",  # 11 hex digits
        "/tmp/openai-agents/bin/name-0123456789abc",  # 13
        "/tmp/openai-agents/bin/Name-0123456789ab",
        f"/workspace/{HELPER.rsplit('/', 1)[1]}",
        f" {HELPER}",
        f"{HELPER} ",
        f"{HELPER}  x",
    ],
)
def test_nothing_but_the_helper_command_is_rewritten(command: str) -> None:
    argv = ["/bin/bash", "-l", "-c", command]
    assert agents_helpers.rewritten(argv) is argv


def test_only_the_sdks_bash_invocation_is_rewritten() -> None:
    for argv in (
        ["/bin/sh", "-l", "-c", HELPER],
        ["/bin/bash", "-c", HELPER],
        ["/bin/bash", "-l", "-c", HELPER, "extra"],
        [HELPER],
        ["/bin/bash", "-l", "-c", HELPER + " " + "x" * agents_helpers.MAX_COMMAND],
    ):
        assert agents_helpers.rewritten(argv) is argv


def test_start_requests_carry_the_rewrite() -> None:
    message = Message(
        {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", SDK_HELPER_CALL]}}, "StartRequest"
    )
    request, _ = start_request(message, None)
    assert request.argv == ["/bin/bash", "-l", "-c", f"/bin/sh {SDK_HELPER_CALL}"]


# -- followers, input and size (no engine) ------------------------------------------------------


def selector(pid: int) -> dict[str, Any]:
    return {"process": {"pid": pid}}


async def test_followers_get_every_event_from_then_on_and_its_end() -> None:
    processes = Processes()
    running = processes.add("0123456789ab", {"cmd": "/bin/sh"}, None)
    first = connect_events(processes, "0123456789ab", Message(selector(running.pid), "C"))
    second = connect_events(processes, "0123456789ab", Message(selector(running.pid), "C"))
    assert await anext(first) == {"event": {"start": {"pid": running.pid}}}
    assert await anext(second) == {"event": {"start": {"pid": running.pid}}}
    data = {"event": {"data": {"stdout": "aGkK"}}}
    running.publish(data)
    running.ended(None)
    assert [message async for message in first] == [data]
    assert [message async for message in second] == [data]
    assert not running.followers


async def test_a_follower_that_falls_behind_is_let_go() -> None:
    processes = Processes()
    running = processes.add("0123456789ab", {}, None)
    follower = connect_events(processes, "0123456789ab", Message(selector(running.pid), "C"))
    await anext(follower)
    for n in range(FOLLOWER_QUEUE + 5):  # never waits: the process is not held back
        running.publish({"event": {"data": {"stdout": str(n)}}})
    assert not running.followers
    received: list[dict[str, Any]] = []

    async def drain() -> None:
        async for message in follower:
            received.append(message)

    with pytest.raises(SandboxError, match=r"fell \d+ events or \d+ MiB behind"):
        await drain()
    assert len(received) == FOLLOWER_QUEUE - 1


async def test_a_follower_is_let_go_by_the_bytes_it_is_behind() -> None:
    """A few events of a MiB each, far under the count, are as many as a follower that does not
    read may hold: the next one lets it go, and what it held is freed with it; a follower that
    reads as they come is never let go."""
    processes = Processes()
    running = processes.add("0123456789ab", {}, None)
    stalled = connect_events(processes, "0123456789ab", Message(selector(running.pid), "C"))
    reading = connect_events(processes, "0123456789ab", Message(selector(running.pid), "C"))
    await anext(stalled)
    await anext(reading)
    big = {"event": {"data": {"stdout": "A" * 1024**2}}}
    fits = FOLLOWER_BYTES // (1024**2 + EVENT_OVERHEAD)
    for _ in range(2 * fits):
        running.publish(big)
        assert await anext(reading) == big
    assert len(running.followers) == 1  # the reading one
    assert next(iter(running.followers)).held == 0
    running.ended(None)
    received: list[dict[str, Any]] = []

    async def drain() -> None:
        async for message in stalled:
            received.append(message)

    with pytest.raises(SandboxError, match=r"fell \d+ events or 4 MiB behind"):
        await drain()
    assert len(received) == fits < FOLLOWER_QUEUE
    assert [message async for message in reading] == []


async def test_a_process_is_found_only_under_its_own_sandbox() -> None:
    processes = Processes()
    running = processes.add("0123456789ab", {}, None)
    elsewhere = connect_events(processes, "ba9876543210", Message(selector(running.pid), "C"))
    with pytest.raises(ProcessNotFoundError):
        await anext(elsewhere)
    for call in (send_input, update):
        with pytest.raises(ProcessNotFoundError):
            await call(processes, "ba9876543210", Message(selector(running.pid), "R"))


async def test_a_commands_input_and_size_are_refused() -> None:
    processes = Processes()
    running = processes.add("0123456789ab", {}, None)
    typed = {**selector(running.pid), "input": {"stdin": base64.b64encode(b"x").decode()}}
    with pytest.raises(E2BUnsupportedError, match="only a PTY takes input"):
        await send_input(processes, "0123456789ab", Message(typed, "SendInputRequest"))
    typed = {**selector(running.pid), "input": {"pty": "eA=="}}
    with pytest.raises(E2BUnsupportedError, match="only a PTY takes input"):
        await send_input(processes, "0123456789ab", Message(typed, "SendInputRequest"))
    sized = {**selector(running.pid), "pty": {"size": {"rows": 30, "cols": 100}}}
    with pytest.raises(E2BUnsupportedError, match="not a PTY"):
        await update(processes, "0123456789ab", Message(sized, "UpdateRequest"))
    bad_size = {**selector(running.pid), "pty": {"size": {"rows": 0, "cols": 100}}}
    with pytest.raises(InvalidRequestError):
        await update(processes, "0123456789ab", Message(bad_size, "UpdateRequest"))


def test_running_records_start_without_followers() -> None:
    running = Running(pid=1000, config={}, tag=None)
    running.publish({"event": {}})  # nobody follows: nothing to hand over
    running.ended(None)
    assert running.failure is None


# -- with the real E2B SDK and a real server ----------------------------------------------------


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any], runtime: str) -> dict[str, Any]:
    return e2b_server_config(jp_server_config, runtime)


@pytest.mark.integration
async def test_connect_follows_a_running_command(e2b_env: str) -> None:
    def scenario() -> None:
        sandbox = Sandbox.create()
        try:
            started = sandbox.commands.run(
                "sleep 1; for i in 1 2 3; do echo line $i; sleep 0.3; done; exit 4",
                background=True,
            )
            lines: list[str] = []
            follower = sandbox.commands.connect(started.pid)
            with pytest.raises(CommandExitException) as ended:
                follower.wait(on_stdout=lines.append)
            assert ended.value.exit_code == 4
            assert "".join(lines) == "line 1\nline 2\nline 3\n"
            with pytest.raises(CommandExitException) as own:
                started.wait()
            assert own.value.exit_code == 4
            assert own.value.stdout == "line 1\nline 2\nline 3\n"
            # Held: a handle dropped closes its stream, which stops its command here.
            sleeper = sandbox.commands.run("sleep 30", background=True)
            with pytest.raises(InvalidArgumentException, match="only a PTY takes input"):
                sandbox.commands.send_stdin(sleeper.pid, "x")
        finally:
            sandbox.kill()

    await asyncio.to_thread(scenario)


@pytest.mark.integration
@pytest.mark.checklist(
    row=114,
    attack="bob, with his own E2B key and his own sandbox's access token, follows (Connect), "
    "types into (SendInput), resizes (Update), signals and lists alice's running process: by "
    "her sandbox id, and by her process's pid under his own sandbox",
    expected="by her sandbox id each call is refused 401 before anything is read; under his "
    "own sandbox her pid is not_found and List shows nothing of hers; her process runs on, "
    "unfollowed, and ends with its own output",
)
async def test_row114_another_owner_cannot_follow_or_drive_a_process(
    e2b_env: str, observe: Callable[..., None]
) -> None:
    alice = await create(e2b_env, "e2b_alice")
    bob = await create(e2b_env, "e2b_bob")
    script = "sleep 3; echo alice-only"
    message = json.dumps({"process": {"cmd": "/bin/sh", "args": ["-c", script]}}).encode()
    alice_headers = {
        "E2b_Sandbox_Id": alice["sandboxID"],
        "X_Access_Token": alice["envdAccessToken"],
    }
    run = asyncio.ensure_future(
        send(
            f"{e2b_env}/sandbox/{START}",
            body=envelope(message),
            Content_Type="application/connect+json",
            **alice_headers,
        )
    )
    pid = None
    deadline = time.monotonic() + 30
    while pid is None:
        assert time.monotonic() < deadline, "alice's process was never listed"
        listed = await send(
            f"{e2b_env}/sandbox/process.Process/List",
            body=b"{}",
            Content_Type="application/json",
            **alice_headers,
        )
        processes = json.loads(listed.body)["processes"]
        pid = processes[0]["pid"] if processes else None
        await asyncio.sleep(0.1)
    process = {"process": {"pid": pid}}
    calls = {
        "Connect": (json.dumps(process).encode(), "application/connect+json"),
        "SendInput": (json.dumps({**process, "input": {"pty": "aWQK"}}).encode(), None),
        "Update": (json.dumps({**process, "pty": {"size": {"rows": 5, "cols": 5}}}).encode(), None),
        "SendSignal": (json.dumps({**process, "signal": "SIGNAL_SIGKILL"}).encode(), None),
    }
    cases = 0
    for name, (body, kind) in calls.items():
        framed = envelope(body) if kind else body
        for sandbox_id, expected in ((alice["sandboxID"], 401), (bob["sandboxID"], 404)):
            response = await send(
                f"{e2b_env}/sandbox/process.Process/{name}",
                body=framed,
                Content_Type=kind or "application/json",
                E2b_Sandbox_Id=sandbox_id,
                X_Access_Token=bob["envdAccessToken"],
            )
            cases += 1
            if kind and response.code == 200:  # a stream's error is its last frame
                code = frames(response.body)[-1][1]["error"]["code"]
                assert code == "not_found", (name, sandbox_id, code)
            else:
                assert response.code == expected, (name, sandbox_id, response.code, response.body)
    listed = await send(
        f"{e2b_env}/sandbox/process.Process/List",
        body=b"{}",
        Content_Type="application/json",
        E2b_Sandbox_Id=bob["sandboxID"],
        X_Access_Token=bob["envdAccessToken"],
    )
    assert json.loads(listed.body) == {"processes": []}
    finished = await run
    events = [message for _, message in frames(finished.body)]
    stdout = b"".join(
        base64.b64decode(event["event"]["data"]["stdout"])
        for event in events
        if "data" in event.get("event", {})
    )
    assert stdout == b"alice-only\n"
    assert events[-2]["event"]["end"]["exitCode"] == 0
    observe(
        "8 calls on alice's process refused (401 by her id, not_found by his); it ran on",
        cases=cases + 1,
    )


@pytest.mark.integration
@pytest.mark.checklist(
    row=115,
    attack="commands shaped like the OpenAI Agents SDK's helper call but carrying more (; id, "
    "$(id), a pipe, a redirection, ../ out of /tmp/openai-agents/bin, a newline), and a real "
    "helper planted in /tmp/openai-agents/bin that reports who runs it",
    expected="only the exact helper shape is run through /bin/sh; every other command runs as "
    "sent, its helper refused by the noexec /tmp (Permission denied, 126) and never read by "
    "sh; the planted helper runs as the sandbox's unprivileged user, as any command does",
)
async def test_row115_the_helper_rewrite_runs_nothing_else(
    e2b_env: str, observe: Callable[..., None]
) -> None:
    made = await create(e2b_env, "e2b_alice")
    headers = {"E2b_Sandbox_Id": made["sandboxID"], "X_Access_Token": made["envdAccessToken"]}

    async def bash_login(command: str) -> tuple[int, bytes]:
        message = json.dumps(
            {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", command]}}
        ).encode()
        response = await send(
            f"{e2b_env}/sandbox/{START}",
            body=envelope(message),
            Content_Type="application/connect+json",
            **headers,
        )
        events = [message for _, message in frames(response.body)]
        out = b"".join(
            base64.b64decode(data.get("stdout", "")) + base64.b64decode(data.get("stderr", ""))
            for event in events
            if (data := event.get("event", {}).get("data"))
        )
        end = [event["event"]["end"] for event in events if "end" in event.get("event", {})]
        return end[0]["exitCode"], out

    helper = "/tmp/openai-agents/bin/who-0123456789ab"
    install = (
        "mkdir -p /tmp/openai-agents/bin && printf 'echo ran-as:$(id -u):$1\\n' > "
        f"{helper} && chmod 0555 {helper} && mkdir -p /workspace/o"
    )
    assert (await bash_login(install))[0] == 0
    code, out = await bash_login(shlex.join([helper, "arg one"]))
    assert code == 0, out
    uid = out.decode().strip().split(":")[1]
    assert out.decode().strip() == f"ran-as:{uid}:arg one"
    assert uid != "0"
    hostile = [
        f"{helper}; touch /workspace/o/semicolon",
        f"{helper} $(touch /workspace/o/substitution)",
        f"{helper} | touch /workspace/o/pipe",
        f"{helper} > /workspace/o/redirect",
        f"{helper}\ntouch /workspace/o/newline",
        "/tmp/openai-agents/bin/../bin/who-0123456789ab",
    ]
    for command in hostile:
        _, out = await bash_login(command)
        # Run as sent: the helper itself is refused by the noexec /tmp, never read by sh. (What
        # a command appends runs as any command of the sandbox's user does.)
        assert b"Permission denied" in out, (command, out)
        assert b"ran-as" not in out, command
    code, out = await bash_login(f"{helper} ; echo status $?")
    assert b"status 126" in out
    assert b"ran-as" not in out
    observe(
        f"the exact helper call ran as uid {uid}; {len(hostile) + 1} other shapes were run as "
        "sent and the noexec /tmp refused the helper in each",
        cases=len(hostile) + 2,
    )
