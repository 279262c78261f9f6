"""/api/sandboxes/{id}/commands, against a real server and a real engine: every answer is
checked against openapi.yaml by ``api``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from jupyter_sandbox.sandbox.container_spec import PROXY_URL
from jupyter_sandbox.sandbox.operations.commands import MAX_ENV_VALUE, MAX_OUTPUT
from jupyter_sandbox.sandbox.programs.exec_marks import EXEC_MARK
from jupyter_sandbox.server_extension.event_stream import sse_event
from tests.server_extension.conftest import Fetch, api
from tests.server_extension.openapi_check import EVENT_STREAM, check_response, parse_events
from tests.server_extension.test_auth_and_spec import with_named_users
from tests.server_extension.test_snapshots import ALICE, BOB

pytestmark = pytest.mark.integration
ALICE_AUTH = "Authorization: token alice"  # ALICE's header, as a line of a request


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    return with_named_users(jp_server_config)


async def command(fetch: Fetch, sandbox_id: str, body: Any, **who: Any) -> tuple[int, Any]:
    return await api(fetch, "POST", sandbox_id, "commands", body=body, **(who or ALICE))


async def test_a_command_runs_as_the_sandbox_user_and_its_outcome_comes_back(
    jp_fetch: Fetch,
) -> None:
    status, made = await api(jp_fetch, "POST", body={}, **ALICE)
    assert status == 201, made
    sandbox_id = made["id"]

    script = "id -u; pwd; echo 'to stderr' >&2; printf 'ü' > made.txt; exit 3"
    status, ran = await command(jp_fetch, sandbox_id, {"command": script})
    assert status == 200, ran
    assert ran["stdout"].split() == ["10001", "/workspace"]  # its user, in its /workspace
    assert (ran["stderr"], ran["exit_code"], ran["timed_out"]) == ("to stderr\n", 3, False)

    # A list runs as it is (no shell), with the given input; what it wrote is the sandbox's.
    body = {"command": ["python3", "-c", "import sys; print(sys.stdin.read()[::-1])"]}
    status, ran = await command(jp_fetch, sandbox_id, {**body, "stdin": "abc"})
    assert (status, ran["stdout"], ran["exit_code"]) == (200, "cba\n", 0), ran
    status, ran = await command(jp_fetch, sandbox_id, {"command": ["cat", "made.txt"]})
    assert (status, ran["stdout"]) == (200, "ü"), ran

    # Its time limit kills it, with what it started.
    slow = {"command": "sleep 300 & sleep 300", "timeout": 1}
    status, ran = await command(jp_fetch, sandbox_id, slow)
    assert (status, ran["timed_out"]) == (200, True), ran
    assert ran["duration"] < 30
    assert not [line for line in await processes(jp_fetch, sandbox_id) if "sleep" in line]

    # A program that is not there says so; another user's sandbox is not found.
    status, ran = await command(jp_fetch, sandbox_id, {"command": ["no-such-program"]})
    assert status == 200, ran
    assert ran["exit_code"] != 0
    assert "could not be started" in ran["stderr"]
    status, error = await command(jp_fetch, sandbox_id, {"command": "true"}, **BOB)
    assert (status, error["code"]) == (404, "sandbox_not_found"), error


async def test_output_past_the_cap_is_refused_naming_the_files_api(jp_fetch: Fetch) -> None:
    status, made = await api(jp_fetch, "POST", body={}, **ALICE)
    assert status == 201, made
    too_much = f"head -c {MAX_OUTPUT + 1} /dev/zero | tr '\\0' a"
    status, error = await command(jp_fetch, made["id"], {"command": too_much})
    assert (status, error["code"]) == (413, "output_too_large"), error
    assert "/files/content" in error["message"]
    status, ran = await command(
        jp_fetch, made["id"], {"command": f"head -c {MAX_OUTPUT} /dev/zero | tr '\\0' a"}
    )
    assert (status, len(ran["stdout"])) == (200, MAX_OUTPUT)
    # Output past the cap stops the command, however long it would go on (`yes` never ends).
    status, error = await command(jp_fetch, made["id"], {"command": ["yes"]})
    assert (status, error["code"]) == (413, "output_too_large"), error
    assert not [line for line in await processes(jp_fetch, made["id"]) if line == "yes"]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ('"ls"', "must be a JSON object"),
        ({}, "command must be a non-empty string"),
        ({"command": ""}, "command must be a non-empty string"),
        ({"command": ["ls", 1]}, "or a non-empty list of strings"),
        ({"command": "ls", "timeout": 0}, "timeout must be a number of seconds above 0"),
        ({"command": "ls", "timeout": 7200}, "at most 3600"),
        ({"command": "ls", "timeout": True}, "timeout must be"),
        ({"command": "ls", "stdin": 5}, "stdin must be a string"),
        ({"command": "ls", "workdir": "/"}, "unknown field(s) workdir"),
        ({"command": "ls", "stream": "true"}, "stream must be true (send the output as it"),
        ({"command": "ls", "stream": 1}, "stream must be true"),
        ({"command": "ls", "stream": None}, "not None"),
    ],
)
async def test_a_bad_request_says_what_to_send(jp_fetch: Fetch, body: Any, says: str) -> None:
    status, made = await api(jp_fetch, "POST", body={}, **ALICE)
    assert status == 201, made
    status, error = await command(jp_fetch, made["id"], body)
    assert (status, error["code"]) == (400, "invalid_request"), error
    assert says in error["message"]


async def test_a_paused_sandbox_is_a_conflict_naming_the_fix(jp_fetch: Fetch) -> None:
    status, made = await api(jp_fetch, "POST", body={}, **ALICE)
    assert status == 201, made
    status, _ = await api(jp_fetch, "POST", made["id"], "pause", **ALICE)
    assert status == 200
    status, error = await command(jp_fetch, made["id"], {"command": "true"})
    assert (status, error["code"]) == (409, "sandbox_conflict"), error
    assert "resume it first" in error["message"]
    # Streamed too: an ordinary error answer, since nothing was sent yet.
    status, error = await command(jp_fetch, made["id"], {"command": "true", "stream": True})
    assert (status, error["code"]) == (409, "sandbox_conflict"), error


@pytest.mark.parametrize("runtime", ["runc", pytest.param("runsc", marks=pytest.mark.runsc)])
async def test_env_and_cwd_are_the_commands_own(jp_fetch: Fetch, runtime: str) -> None:
    status, made = await api(jp_fetch, "POST", body={"runtime": runtime}, **ALICE)
    assert status == 201, made
    sandbox_id = made["id"]
    show = 'printf "%s|%s|%s|%s" "$GREETING" "$HTTP_PROXY" "$HOME" "$PWD"'

    # Added to the sandbox's environment for this command; a name it has is replaced.
    env = {"GREETING": "hi there=ü\n", "HTTP_PROXY": "http://elsewhere.invalid:3128"}
    status, ran = await command(jp_fetch, sandbox_id, {"command": show, "env": env})
    assert (status, ran["exit_code"]) == (200, 0), ran
    assert ran["stdout"] == "hi there=ü\n|http://elsewhere.invalid:3128|/workspace|/workspace"
    # ... for that command alone: the next sees the sandbox's own again.
    status, ran = await command(jp_fetch, sandbox_id, {"command": show})
    assert ran["stdout"] == f"|{PROXY_URL}|/workspace|/workspace", ran

    # The deadline's mark cannot be named; with other variables it still marks the command,
    # whose time limit kills it with what it started.
    status, error = await command(
        jp_fetch, sandbox_id, {"command": "true", "env": {EXEC_MARK: "mine"}}
    )
    assert (status, error["code"]) == (400, "invalid_request"), error
    assert f"env may not set {EXEC_MARK}" in error["message"]
    slow = {"command": "sleep 300 & sleep 300", "timeout": 1, "env": {"PATH": "/usr/bin:/bin"}}
    status, ran = await command(jp_fetch, sandbox_id, slow)
    assert (status, ran["timed_out"]) == (200, True), ran
    assert not [line for line in await processes(jp_fetch, sandbox_id) if "sleep" in line]
    status, ran = await command(
        jp_fetch, sandbox_id, {"command": f"env | grep -c ^{EXEC_MARK}=", "env": {"A": "1"}}
    )
    assert ran["stdout"] == "1\n", ran  # the mark, once, whatever else was added

    # cwd: the command starts there; relative paths are its.
    status, ran = await command(jp_fetch, sandbox_id, {"command": "mkdir -p 'sub dir/inner'"})
    assert (status, ran["exit_code"]) == (200, 0), ran
    in_sub = {"command": ["sh", "-c", "pwd; ls; touch here"], "cwd": "/workspace/sub dir"}
    status, ran = await command(jp_fetch, sandbox_id, in_sub)
    assert (status, ran["stdout"], ran["exit_code"]) == (200, "/workspace/sub dir\ninner\n", 0)
    status, ran = await command(jp_fetch, sandbox_id, {"command": "ls 'sub dir'", "cwd": "/tmp"})
    assert ran["exit_code"] != 0, ran  # /tmp/sub dir: relative to the cwd given
    status, ran = await command(jp_fetch, sandbox_id, {"command": "ls 'sub dir'"})
    assert ran["stdout"] == "here\ninner\n", ran  # the default is still /workspace

    # A cwd the sandbox lacks: a 404 saying what to do; the command never ran, nothing was made.
    status, before = await command(jp_fetch, sandbox_id, {"command": "ls -AR /workspace"})
    assert status == 200, before
    missing = {"command": ["touch", "ran"], "cwd": "/workspace/missing"}
    status, error = await command(jp_fetch, sandbox_id, missing)
    assert (status, error["code"]) == (404, "file_not_found"), error
    assert error["message"].startswith(
        "cwd /workspace/missing does not exist in the sandbox: create it first"
    )
    assert "or leave cwd out" in error["message"]
    status, after = await command(jp_fetch, sandbox_id, {"command": "ls -AR /workspace"})
    assert after["stdout"] == before["stdout"]  # no /workspace/missing, no "ran"
    if runtime == "runc":  # runsc starts a command in a file, whose relative paths then fail
        status, error = await command(jp_fetch, sandbox_id, {**missing, "cwd": "/etc/passwd"})
        assert (status, error["code"]) == (409, "file_type"), error  # what is there is in the way
        assert "cwd /etc/passwd is not a directory" in error["message"]

    # A program missing from a cwd that exists is still the program's fault, as without cwd.
    status, ran = await command(jp_fetch, sandbox_id, {"command": ["nope"], "cwd": "/tmp"})
    assert (status, ran["exit_code"], ran["stdout"]) == (200, 126, ""), ran
    assert "'nope' could not be started" in ran["stderr"]


async def test_a_bad_env_or_cwd_is_a_400_and_nothing_runs(jp_fetch: Fetch) -> None:
    status, made = await api(jp_fetch, "POST", body={}, **ALICE)
    assert status == 201, made
    sandbox_id = made["id"]
    runs = ["touch", "/workspace/ran"]  # what would show that a refused request ran
    bodies = [
        ({"env": ["DEBUG=1"]}, "env must be a JSON object of variable names to string values"),
        ({"env": {"NOT-A-NAME": "1"}}, "env name 'NOT-A-NAME' is not a variable name"),
        ({"env": {"DEBUG": 1}}, "env DEBUG must be a string without NUL characters"),
        ({"env": {"BIG": "x" * (MAX_ENV_VALUE + 1)}}, "a value may hold at most 32 KiB"),
        ({"env": {f"V{n}": "" for n in range(257)}}, "env may hold at most 256 variables"),
        ({"cwd": "workspace"}, "cwd must be an absolute path in the sandbox"),
        ({"cwd": "/" + "d" * 4096}, "cwd may hold at most 4096 bytes"),
    ]
    for body, says in bodies:
        status, error = await command(jp_fetch, sandbox_id, {"command": runs, **body})
        assert (status, error["code"]) == (400, "invalid_request"), (body, error)
        assert says in error["message"], (says, error["message"])
        assert "e.g." in error["message"] or "at most" in error["message"], error["message"]
    status, ran = await command(jp_fetch, sandbox_id, {"command": "ls /workspace/ran || echo no"})
    assert (status, ran["stdout"]) == (200, "no\n"), ran


# -- "stream": true ------------------------------------------------------------------------------


@dataclass
class Stream:
    """What a streamed command sent, as the client saw it arrive."""

    status: int
    content_type: str
    events: list[tuple[float, str, Any]] = field(default_factory=list)  # (arrival, name, data)
    body: bytes = b""  # of an answer that is not an event stream
    ended: float = 0.0  # when the answer was complete (time.monotonic)

    def text(self, name: str) -> str:
        return "".join(data["text"] for _, event, data in self.events if event == name)

    def last(self) -> tuple[str, Any]:
        return self.events[-1][1:]


async def stream(
    fetch: Fetch,
    sandbox_id: str,
    body: dict[str, Any],
    *,
    route: str = "commands",
    **who: Any,
) -> Stream:
    """POST a command (or to another streaming ``route``: code, to execute) with "stream":
    true, reading its events as they arrive (each with its arrival time); checked against
    openapi.yaml."""
    seen = Stream(0, "")
    pending = bytearray()

    def arrived(chunk: bytes) -> None:
        now = time.monotonic()
        if seen.content_type != EVENT_STREAM:
            seen.body += chunk
            return
        pending.extend(chunk)
        while (end := pending.find(b"\n\n")) >= 0:
            block = bytes(pending[: end + 2])
            del pending[: end + 2]
            ((name, data),) = parse_events(block.decode())
            seen.events.append((now, name, data))

    def headers(line: str) -> None:
        name, _, value = line.partition(":")
        if name.lower() == "content-type":
            seen.content_type = value.strip().partition(";")[0]

    response = await fetch(
        *("api", "sandboxes", sandbox_id, route),
        method="POST",
        body=json.dumps({**body, "stream": True}),
        streaming_callback=arrived,
        header_callback=headers,
        raise_error=False,
        request_timeout=300,
        **(who or ALICE),
    )
    seen.ended = time.monotonic()
    seen.status = response.code
    assert not pending, pending
    where = f"/api/sandboxes/{sandbox_id}/{route}"
    if seen.content_type == EVENT_STREAM:
        check_response(
            where, "POST", seen.status, [(n, d) for _, n, d in seen.events], EVENT_STREAM
        )
    else:
        check_response(where, "POST", seen.status, json.loads(seen.body))
    return seen


def test_an_event_is_one_data_line_whatever_its_text_holds() -> None:
    text = "two\nlines\r\n\n\nü \u2028 \x00 data: x\n\nevent: fake\n"
    sent = sse_event("stdout", {"text": text})
    assert sent.count(b"\n") == 3  # "event: ...", "data: ...", the blank line that ends it
    assert sent.startswith(b"event: stdout\ndata: {")
    assert sent.endswith(b"}\n\n")
    assert parse_events(sent.decode()) == [("stdout", {"text": text})]


@pytest.mark.parametrize("runtime", ["runc", pytest.param("runsc", marks=pytest.mark.runsc)])
async def test_a_streamed_command_sends_its_output_as_it_comes(
    jp_fetch: Fetch, runtime: str
) -> None:
    status, made = await api(jp_fetch, "POST", body={"runtime": runtime}, **ALICE)
    assert status == 201, made
    sandbox_id = made["id"]

    script = "echo first; sleep 1; echo second; echo oops >&2; exit 5"
    ran = await stream(jp_fetch, sandbox_id, {"command": script})
    assert (ran.status, ran.content_type) == (200, EVENT_STREAM), ran
    stdouts = [(at, data["text"]) for at, name, data in ran.events if name == "stdout"]
    assert [text for _, text in stdouts] == ["first\n", "second\n"], ran.events
    # The first line came while the command still slept: a second before the second line,
    # and before the answer ended.
    assert stdouts[1][0] - stdouts[0][0] >= 0.8, stdouts
    assert ran.ended - stdouts[0][0] >= 0.8
    assert ran.text("stderr") == "oops\n"
    name, result = ran.last()
    assert name == "result"
    assert (result["exit_code"], result["timed_out"]) == (5, False), result
    assert (result["stdout"], result["stderr"]) == ("", "")
    assert result["duration"] >= 1

    # A character split between two writes arrives whole, in the event of its second half;
    # bytes that are no UTF-8 are replaced, and so is a character the output ends in.
    split = "printf '\\303'; sleep 0.3; printf '\\251|\\377|'; printf '\\342\\202' >&2"
    ran = await stream(jp_fetch, sandbox_id, {"command": split})
    assert ran.status == 200, ran
    assert ran.text("stdout") == "é|\ufffd|", ran.events
    assert all(data["text"] for _, name, data in ran.events if name == "stdout")
    assert ran.text("stderr") == "\ufffd", ran.events
    assert ran.last()[1]["exit_code"] == 0

    # A program that could not start says so as its stderr; a missing cwd is an error answer.
    ran = await stream(jp_fetch, sandbox_id, {"command": ["no-such-program"]})
    assert ran.status == 200, ran
    assert "'no-such-program' could not be started" in ran.text("stderr")
    assert ran.text("stdout") == ""  # not the engine's own message
    assert ran.last()[1]["exit_code"] == 126
    ran = await stream(jp_fetch, sandbox_id, {"command": "true", "cwd": "/workspace/missing"})
    assert (ran.status, ran.content_type) == (404, "application/json"), ran
    assert json.loads(ran.body)["code"] == "file_not_found"
    # Another user's sandbox is not found, streamed or not.
    ran = await stream(jp_fetch, sandbox_id, {"command": "true"}, **BOB)
    assert (ran.status, json.loads(ran.body)["code"]) == (404, "sandbox_not_found"), ran


async def test_streamed_output_has_no_cap_and_arrives_whole(jp_fetch: Fetch) -> None:
    status, made = await api(jp_fetch, "POST", body={}, **ALICE)
    assert status == 201, made
    size = MAX_OUTPUT + 4 * 1024**2  # past the cap of an answer that is not streamed
    flood = f"head -c {size} /dev/zero | tr '\\0' a; echo done >&2"
    ran = await stream(jp_fetch, made["id"], {"command": flood})
    assert ran.status == 200, ran.body
    out = ran.text("stdout")
    assert (len(out), set(out)) == (size, {"a"})
    assert len(ran.events) > 2  # in pieces, not one event
    assert ran.text("stderr") == "done\n"
    name, result = ran.last()
    assert (name, result["exit_code"], result["timed_out"]) == ("result", 0, False), result


async def test_a_streamed_command_past_its_timeout_is_killed(jp_fetch: Fetch) -> None:
    status, made = await api(jp_fetch, "POST", body={}, **ALICE)
    assert status == 201, made
    sandbox_id = made["id"]
    slow = {"command": "echo going; sleep 300 & sleep 300", "timeout": 1, "stream": True}
    status, events = await command(jp_fetch, sandbox_id, slow)  # read whole, by api()
    assert status == 200, events
    assert events[0] == ("stdout", {"text": "going\n"}), events
    name, result = events[-1]
    assert (name, result["timed_out"]) == ("result", True), events
    assert result["duration"] < 30
    assert not [line for line in await processes(jp_fetch, sandbox_id) if "sleep" in line]


# The command line of every process in the sandbox (it has no ps or pgrep), one a line: the
# newlines in one (a supervisor's program, given as python3 -c SOURCE) made spaces too.
_PROCESSES = "for p in /proc/[0-9]*; do tr '\\0\\n' '  ' < $p/cmdline 2>/dev/null; echo; done"


async def processes(fetch: Fetch, sandbox_id: str) -> list[str]:
    """The command lines of the processes running in the sandbox (this one's own left out)."""
    status, ran = await command(fetch, sandbox_id, {"command": _PROCESSES})
    assert (status, ran["exit_code"]) == (200, 0), ran
    lines = [line.strip() for line in ran["stdout"].splitlines()]
    found = [line for line in lines if line and not line.endswith(_PROCESSES)]
    assert any("sandbox-init" in line for line in found), found  # the listing works
    return found


@contextlib.asynccontextmanager
async def open_stream(
    port: int, path: str, text: bytes, body: dict[str, Any] | None = None
) -> AsyncIterator[None]:
    """Ask for ``path``'s events as alice over a connection of its own (GET, or a POST of
    ``body`` streamed), read until ``text`` arrives, check it is an event stream, and keep the
    connection open for the block; then close it (tornado's client would log the hang-up as an
    error of its own)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        if body is None:
            request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{ALICE_AUTH}\r\n\r\n"
            writer.write(request.encode())
        else:
            payload = json.dumps({**body, "stream": True}).encode()
            head = (
                f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                f"{ALICE_AUTH}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\n\r\n"
            )
            writer.write(head.encode() + payload)
        received = b""
        while text not in received:
            chunk = await asyncio.wait_for(reader.read(65536), 60)
            assert chunk, received
            received += chunk
        assert received.startswith(b"HTTP/1.1 200 "), received
        assert b"Content-Type: text/event-stream" in received, received
        yield
    finally:
        writer.close()
        await writer.wait_closed()


async def hang_up_after(port: int, path: str, body: dict[str, Any], text: bytes) -> None:
    """POST ``body`` (streamed) to ``path`` as alice, read until ``text`` arrives, and hang up."""
    async with open_stream(port, path, text, body):
        pass


@pytest.mark.parametrize("runtime", ["runc", pytest.param("runsc", marks=pytest.mark.runsc)])
async def test_a_client_that_leaves_a_stream_stops_the_command(
    jp_fetch: Fetch, jp_http_port: int, jp_base_url: str, runtime: str
) -> None:
    status, made = await api(jp_fetch, "POST", body={"runtime": runtime}, **ALICE)
    assert status == 201, made
    sandbox_id = made["id"]
    marker = f"marker-{uuid.uuid4().hex}"
    # The marker is in the shell's arguments; its child sleep is found by name.
    body = {"command": ["sh", "-c", "echo started; sleep 600 & wait", marker], "timeout": 900}
    path = f"{jp_base_url}api/sandboxes/{sandbox_id}/commands"
    await hang_up_after(jp_http_port, path, body, b'"started\\n"')
    left = time.monotonic()

    while True:
        found = await processes(jp_fetch, sandbox_id)
        running = [line for line in found if marker in line or line.startswith("sleep")]
        if not running or time.monotonic() - left > 10:
            break
        await asyncio.sleep(0.2)
    gone_after = time.monotonic() - left
    assert not running, f"still running {gone_after:.1f}s after the client left: {found}"
    print(f"{runtime}: the command was gone {gone_after:.2f}s after the client left")
