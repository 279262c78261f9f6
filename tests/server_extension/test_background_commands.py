"""Background commands over REST, against a real server and a real engine: started with
``POST /api/sandboxes/{id}/commands`` and ``"background": true``, listed, looked at, their
output read piece by piece, and stopped with ``DELETE .../commands/{command_id}``. Every answer
is checked against openapi.yaml (by ``api``, and by ``check_response`` for the start). The core
is tested in tests/sandbox/operations/test_background.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_sandbox.server_extension import SandboxExtension
from tests.conftest import BOTH_RUNTIMES
from tests.server_extension.conftest import Fetch, api
from tests.server_extension.openapi_check import check_response
from tests.server_extension.test_auth_and_spec import with_named_users
from tests.server_extension.test_commands import command, processes
from tests.server_extension.test_execute import new_sandbox
from tests.server_extension.test_snapshots import ALICE, BOB

pytestmark = pytest.mark.integration

# What the core says of a background request with a field it cannot take.
NOT_WITH_BACKGROUND = "a background command takes no stdin, stream or timeout"


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    return with_named_users(jp_server_config)


async def start(
    fetch: Fetch, sandbox_id: str, body: dict[str, Any], **who: Any
) -> tuple[int, Any, str | None]:
    """POST ``body`` with "background": true: (status, decoded JSON, Location header)."""
    try:
        response = await fetch(
            "api",
            "sandboxes",
            sandbox_id,
            "commands",
            method="POST",
            body=json.dumps({**body, "background": True}),
            **(who or ALICE),
        )
    except HTTPClientError as error:
        response = error.response
        assert response is not None
    decoded = json.loads(response.body)
    check_response(f"/api/sandboxes/{sandbox_id}/commands", "POST", response.code, decoded)
    return response.code, decoded, response.headers.get("Location")


async def started(fetch: Fetch, sandbox_id: str, script: str, **fields: Any) -> str:
    """Start ``script`` in the background as alice; its command id."""
    status, made, _ = await start(fetch, sandbox_id, {"command": script, **fields})
    assert status == 201, made
    return str(made["id"])


async def background(
    fetch: Fetch, method: str, sandbox_id: str, *path: str, **kwargs: Any
) -> tuple[int, Any]:
    """``method`` on /api/sandboxes/``sandbox_id``/commands/``path``, as alice by default."""
    who = {} if "headers" in kwargs else ALICE
    return await api(fetch, method, sandbox_id, "commands", *path, **who, **kwargs)


async def until(check: Callable[[], Awaitable[bool]], seconds: float = 30.0) -> None:
    for _ in range(int(seconds / 0.1)):
        if await check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the condition never held")


async def ended(fetch: Fetch, sandbox_id: str, command_id: str) -> dict[str, Any]:
    """The command once it has ended (polled)."""
    seen: dict[str, Any] = {}

    async def done() -> bool:
        status, found = await background(fetch, "GET", sandbox_id, command_id)
        assert status == 200, found
        seen.update(found)
        return not found["running"]

    await until(done)
    return seen


@pytest.mark.parametrize("runtime", BOTH_RUNTIMES)
async def test_a_background_command_runs_on_and_its_output_is_read_in_pieces(
    jp_fetch: Fetch, jp_base_url: str, runtime: str
) -> None:
    sandbox_id = await new_sandbox(jp_fetch, runtime)
    status, ran = await command(jp_fetch, sandbox_id, {"command": ["mkfifo", "/workspace/go"]})
    assert (status, ran["exit_code"]) == (200, 0), ran

    # It waits on the fifo, yet the answer comes at once, naming the command's route.
    script = 'echo one; echo two >&2; read line < /workspace/go; echo "$GREETING é"; exit 3'
    body = {"command": script, "env": {"GREETING": "hello"}}
    status, made, location = await start(jp_fetch, sandbox_id, body)
    assert status == 201, made
    command_id = made["id"]
    assert location == f"{jp_base_url}api/sandboxes/{sandbox_id}/commands/{command_id}"
    assert made["command"] == ["/bin/sh", "-c", script]
    assert (made["cwd"], made["running"], made["exit_code"]) == ("/workspace", True, None)
    status, listed = await background(jp_fetch, "GET", sandbox_id)
    assert (status, listed) == (200, {"commands": [made]})

    # Standard output and error, interleaved in one log, read from an offset on.
    async def printed_two() -> bool:
        status, out = await background(jp_fetch, "GET", sandbox_id, command_id, "output")
        assert status == 200, out
        return bool(out["text"] == "one\ntwo\n")

    await until(printed_two)
    params = {"offset": "0", "limit": "4"}
    status, cut = await background(jp_fetch, "GET", sandbox_id, command_id, "output", params=params)
    assert status == 200, cut
    assert cut == {"text": "one\n", "offset": 0, "next_offset": 4, "size": 8, "running": True}
    params = {"offset": str(cut["next_offset"])}
    status, first = await background(
        jp_fetch, "GET", sandbox_id, command_id, "output", params=params
    )
    assert (status, first["text"], first["next_offset"], first["running"]) == (
        200,
        "two\n",
        8,
        True,
    ), first

    # Released by an ordinary command, it prints again and ends with its own exit status.
    status, ran = await command(jp_fetch, sandbox_id, {"command": "echo go > /workspace/go"})
    assert (status, ran["exit_code"]) == (200, 0), ran
    finished = await ended(jp_fetch, sandbox_id, command_id)
    assert (finished["running"], finished["exit_code"]) == (False, 3), finished
    params = {"offset": str(first["next_offset"])}
    status, rest = await background(
        jp_fetch, "GET", sandbox_id, command_id, "output", params=params
    )
    assert status == 200, rest
    assert rest == {
        "text": "hello é\n",
        "offset": 8,
        "next_offset": 17,
        "size": 17,
        "running": False,
    }
    status, listed = await background(jp_fetch, "GET", sandbox_id)
    assert [c["exit_code"] for c in listed["commands"]] == [3]

    # Removed: forgotten, its output with it.
    assert await background(jp_fetch, "DELETE", sandbox_id, command_id) == (204, None)
    status, error = await background(jp_fetch, "GET", sandbox_id, command_id)
    assert (status, error["code"]) == (404, "command_not_found"), error
    assert await background(jp_fetch, "GET", sandbox_id) == (200, {"commands": []})


async def test_removing_a_command_stops_all_it_started(jp_fetch: Fetch) -> None:
    sandbox_id = await new_sandbox(jp_fetch)
    command_id = await started(jp_fetch, sandbox_id, "sleep 600 & sleep 601")

    async def both_sleep() -> bool:
        found = await processes(jp_fetch, sandbox_id)
        return {"sleep 600", "sleep 601"} <= set(found)

    await until(both_sleep)
    assert await background(jp_fetch, "DELETE", sandbox_id, command_id) == (204, None)
    assert not [line for line in await processes(jp_fetch, sandbox_id) if "sleep 60" in line]
    for path in ([command_id], [command_id, "output"]):
        status, error = await background(jp_fetch, "GET", sandbox_id, *path)
        assert (status, error["code"]) == (404, "command_not_found"), (path, error)
    status, error = await background(jp_fetch, "DELETE", sandbox_id, command_id)
    assert (status, error["code"]) == (404, "command_not_found"), error


async def test_a_bad_request_says_what_to_send_and_starts_nothing(jp_fetch: Fetch) -> None:
    sandbox_id = await new_sandbox(jp_fetch)
    refused = [
        ({"command": "cat", "stdin": "x"}, NOT_WITH_BACKGROUND),
        ({"command": "ls", "stream": True}, NOT_WITH_BACKGROUND),
        ({"command": "ls", "stream": False}, NOT_WITH_BACKGROUND),  # present is enough
        ({"command": "sleep 5", "timeout": 10}, NOT_WITH_BACKGROUND),
        ({"command": ""}, "command must be a non-empty string"),
    ]
    for body, says in refused:
        status, error, location = await start(jp_fetch, sandbox_id, body)
        assert (status, error["code"], location) == (400, "invalid_request", None), body
        assert says in error["message"], (body, error)
    status, error = await command(jp_fetch, sandbox_id, {"command": "ls", "background": "yes"})
    assert (status, error["code"]) == (400, "invalid_request"), error
    assert "background must be true (start it and answer at once" in error["message"]
    assert await background(jp_fetch, "GET", sandbox_id) == (200, {"commands": []})

    # The output's offset and limit are integers in range; the message names the one wrong.
    command_id = await started(jp_fetch, sandbox_id, "echo hi")
    for params, says in [
        ({"offset": "abc"}, "the query argument offset must be an integer"),
        ({"offset": "1.5"}, "the query argument offset must be an integer"),
        ({"limit": "lots"}, "the query argument limit must be an integer"),
        ({"offset": "9" * 20}, "offset must be an integer of at most 19 digits"),
        ({"offset": "-1"}, "offset must be 0 or more"),
        ({"limit": "0"}, "limit between 1 and 1048576 bytes (offset 0, limit 0)"),
    ]:
        status, error = await background(
            jp_fetch, "GET", sandbox_id, command_id, "output", params=params
        )
        assert (status, error["code"]) == (400, "invalid_request"), (params, error)
        assert says in error["message"], (params, error)
    assert await background(jp_fetch, "DELETE", sandbox_id, command_id) == (204, None)


@pytest.mark.checklist(
    row=136,
    attack="background commands whose record would fill the sandbox's state file (read on the "
    "event loop by every listing): a 9 KiB script, 1,400 control characters (8 KiB as JSON), "
    "and a 4 KiB cwd of control characters",
    expected="each refused 400 naming the 8 KiB a background command may hold; nothing "
    "started, and a command just under the bound starts",
)
async def test_a_background_command_too_large_to_keep_is_refused(
    jp_fetch: Fetch, observe: Callable[..., None]
) -> None:
    sandbox_id = await new_sandbox(jp_fetch)
    refused = [
        {"command": "echo " + "x" * 9 * 1024},
        {"command": ["/bin/echo", "\x01" * 1400]},
        {"command": "true", "cwd": "/" + "\x01" * 4000},
    ]
    for body in refused:
        status, error, location = await start(jp_fetch, sandbox_id, body)
        assert (status, error["code"], location) == (400, "invalid_request", None), error
        assert "may hold at most 8 KiB (its command and cwd written as JSON)" in error["message"]
    assert await background(jp_fetch, "GET", sandbox_id) == (200, {"commands": []})
    command_id = await started(jp_fetch, sandbox_id, "echo " + "x" * 8000)
    assert (await ended(jp_fetch, sandbox_id, command_id))["exit_code"] == 0
    observe("3 oversized background commands refused 400; one of 8000 bytes ran", cases=3)


async def test_another_users_sandbox_and_unknown_commands_are_not_found(
    jp_fetch: Fetch,
) -> None:
    sandbox_id = await new_sandbox(jp_fetch)
    command_id = await started(jp_fetch, sandbox_id, "sleep 600")

    # Bob finds neither alice's sandbox nor her command, and starts or stops nothing there.
    status, error, location = await start(jp_fetch, sandbox_id, {"command": "sleep 601"}, **BOB)
    assert (status, error["code"], location) == (404, "sandbox_not_found", None), error
    for method, path in [
        ("GET", []),
        ("GET", [command_id]),
        ("GET", [command_id, "output"]),
        ("DELETE", [command_id]),
    ]:
        status, error = await background(jp_fetch, method, sandbox_id, *path, **BOB)
        assert (status, error["code"]) == (404, "sandbox_not_found"), (method, path, error)
    status, listed = await background(jp_fetch, "GET", sandbox_id)
    assert [(c["id"], c["running"]) for c in listed["commands"]] == [(command_id, True)]

    # An id the sandbox does not have, well-formed or not, is the core's 404.
    for unknown in ("0123456789ab", "0123456789AB", "not-a-command", "f" * 64):
        for method, path in [
            ("GET", [unknown]),
            ("GET", [unknown, "output"]),
            ("DELETE", [unknown]),
        ]:
            status, error = await background(jp_fetch, method, sandbox_id, *path)
            assert (status, error["code"]) == (404, "command_not_found"), (method, path, error)
    assert await background(jp_fetch, "DELETE", sandbox_id, command_id) == (204, None)


async def test_a_paused_sandbox_keeps_its_commands_until_resumed(
    jp_fetch: Fetch, extension: SandboxExtension, monkeypatch: pytest.MonkeyPatch
) -> None:
    sandbox_id = await new_sandbox(jp_fetch)
    command_id = await started(jp_fetch, sandbox_id, "sleep 600")
    status, _ = await api(jp_fetch, "POST", sandbox_id, "pause", **ALICE)
    assert status == 200

    # Its processes are frozen: they can be looked at, not read from or killed.
    status, found = await background(jp_fetch, "GET", sandbox_id, command_id)
    assert (status, found["id"]) == (200, command_id), found
    for method, path in [("DELETE", [command_id]), ("GET", [command_id, "output"])]:
        status, error = await background(jp_fetch, method, sandbox_id, *path)
        assert (status, error["code"]) == (409, "sandbox_conflict"), (method, path, error)
        assert "resume it" in error["message"]
    status, error, _ = await start(jp_fetch, sandbox_id, {"command": "true"})
    assert (status, error["code"]) == (409, "sandbox_conflict"), error

    status, _ = await api(jp_fetch, "POST", sandbox_id, "resume", **ALICE)
    assert status == 200
    # A sandbox keeps at most max_per_sandbox commands, running or ended.
    monkeypatch.setattr(extension.manager.background, "max_per_sandbox", 1)
    status, error, _ = await start(jp_fetch, sandbox_id, {"command": "true"})
    assert (status, error["code"]) == (429, "too_many_commands"), error
    assert "remove ended ones first" in error["message"]
    assert await background(jp_fetch, "DELETE", sandbox_id, command_id) == (204, None)
    assert await background(jp_fetch, "GET", sandbox_id) == (200, {"commands": []})
