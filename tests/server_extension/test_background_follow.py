"""A background command's output followed over REST, against a real server and a real engine:
``GET .../commands/{command_id}/output?follow=true&offset=N`` answers Server-Sent Events as the
output comes, then the command's result; a bad ``follow`` is a 400; a client that hangs up
stops the following, not the command. Every answer is checked against openapi.yaml. The core
is tested in tests/sandbox/operations/test_background_follow.py."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

from tests.server_extension.conftest import Fetch
from tests.server_extension.openapi_check import EVENT_STREAM, check_response, parse_events
from tests.server_extension.test_auth_and_spec import with_named_users
from tests.server_extension.test_background_commands import background, ended, started
from tests.server_extension.test_commands import command, open_stream, processes
from tests.server_extension.test_execute import new_sandbox
from tests.server_extension.test_snapshots import ALICE, BOB

pytestmark = pytest.mark.integration


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    return with_named_users(jp_server_config)


class Followed:
    """A followed command's answer, read as it arrives: its events, each with its arrival."""

    def __init__(self) -> None:
        self.content_type = ""
        self.events: list[tuple[float, str, Any]] = []
        self.arrived = asyncio.Event()  # set at each event
        self._pending = bytearray()

    def chunk(self, data: bytes) -> None:
        self._pending.extend(data)
        while (end := self._pending.find(b"\n\n")) >= 0:
            block = bytes(self._pending[: end + 2])
            del self._pending[: end + 2]
            ((name, event),) = parse_events(block.decode())
            self.events.append((time.monotonic(), name, event))
            self.arrived.set()

    def header(self, line: str) -> None:
        name, _, value = line.partition(":")
        if name.lower() == "content-type":
            self.content_type = value.strip().partition(";")[0]


async def follow(fetch: Fetch, sandbox_id: str, command_id: str, seen: Followed) -> int:
    """Follow the command as alice, each event into ``seen`` as it comes; the answer's status
    once the stream has ended (checked against openapi.yaml)."""
    response = await fetch(
        *("api", "sandboxes", sandbox_id, "commands", command_id, "output"),
        params={"follow": "true"},
        streaming_callback=seen.chunk,
        header_callback=seen.header,
        raise_error=False,
        request_timeout=120,
        **ALICE,
    )
    assert seen.content_type == EVENT_STREAM, seen.content_type
    where = f"/api/sandboxes/{sandbox_id}/commands/{command_id}/output"
    check_response(where, "GET", response.code, [e[1:] for e in seen.events], EVENT_STREAM)
    return int(response.code)


async def test_output_is_streamed_as_it_comes_then_the_exit_code(jp_fetch: Fetch) -> None:
    sandbox_id = await new_sandbox(jp_fetch)
    script = (
        "echo first; while [ ! -e /workspace/go ]; do sleep 0.05; done; "
        "for i in 2 3; do echo line $i; sleep 0.3; done; exit 4"
    )
    command_id = await started(jp_fetch, sandbox_id, script)
    seen = Followed()
    following = asyncio.ensure_future(follow(jp_fetch, sandbox_id, command_id, seen))
    await asyncio.wait_for(seen.arrived.wait(), 30)  # while the command still waits
    assert seen.events[0][1:] == ("output", {"text": "first\n", "offset": 0, "next_offset": 6})
    released = time.monotonic()
    status, ran = await command(jp_fetch, sandbox_id, {"command": "touch /workspace/go"})
    assert (status, ran["exit_code"]) == (200, 0), ran
    assert await following == 200
    pieces = [(when, data) for when, name, data in seen.events if name == "output"]
    assert "".join(data["text"] for _, data in pieces) == "first\nline 2\nline 3\n"
    assert [data["offset"] for _, data in pieces[1:]] == [d["next_offset"] for _, d in pieces[:-1]]
    assert pieces[-1][0] - released > 0.2, seen.events  # the last line came later than the rest
    name, result = seen.events[-1][1:]
    assert (name, result["id"], result["running"], result["exit_code"]) == (
        "result",
        command_id,
        False,
        4,
    )

    # An ended command from an offset: the rest at once, then how it ended; follow=false (or
    # 0) is the plain read, as without it.
    for value in ("true", "1", "TRUE"):
        params = {"follow": value, "offset": "6"}
        status, events = await background(
            jp_fetch, "GET", sandbox_id, command_id, "output", params=params
        )
        assert status == 200, events
        assert [name for name, _ in events] == ["output", "result"], events
        assert events[0][1] == {"text": "line 2\nline 3\n", "offset": 6, "next_offset": 20}
    for value in ("false", "0"):
        params = {"follow": value, "offset": "6"}
        status, piece = await background(
            jp_fetch, "GET", sandbox_id, command_id, "output", params=params
        )
        assert (status, piece["text"], piece["running"]) == (200, "line 2\nline 3\n", False)
    assert await background(jp_fetch, "DELETE", sandbox_id, command_id) == (204, None)


async def test_bad_follow_requests_are_refused_before_any_event(jp_fetch: Fetch) -> None:
    sandbox_id = await new_sandbox(jp_fetch)
    command_id = await started(jp_fetch, sandbox_id, "echo hi")
    await ended(jp_fetch, sandbox_id, command_id)
    for params, says in [
        ({"follow": "yes"}, "the query argument follow must be true or false (1 or 0), not 'yes'"),
        ({"follow": ""}, "follow must be true or false"),
        ({"follow": "true", "limit": "10"}, "leave limit out"),
        ({"follow": "true", "offset": "-1"}, "offset must be 0 or more"),
        ({"follow": "true", "offset": "x"}, "the query argument offset must be an integer"),
    ]:
        status, error = await background(
            jp_fetch, "GET", sandbox_id, command_id, "output", params=params
        )
        assert (status, error["code"]) == (400, "invalid_request"), (params, error)
        assert says in error["message"], (params, error)
    for path, who, code in [
        ("0123456789ab", ALICE, "command_not_found"),
        (command_id, BOB, "sandbox_not_found"),
    ]:
        status, error = await background(
            jp_fetch, "GET", sandbox_id, path, "output", params={"follow": "1"}, **who
        )
        assert (status, error["code"]) == (404, code), error
    assert await background(jp_fetch, "DELETE", sandbox_id, command_id) == (204, None)


async def test_a_client_that_leaves_the_stream_leaves_the_command_running(
    jp_fetch: Fetch, jp_http_port: int, jp_base_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="jupyter_sandbox.server_extension.event_stream")
    sandbox_id = await new_sandbox(jp_fetch)
    command_id = await started(jp_fetch, sandbox_id, "echo started; sleep 600")
    path = f"{jp_base_url}api/sandboxes/{sandbox_id}/commands/{command_id}/output?follow=true"
    async with open_stream(jp_http_port, path, b'"started\\n"'):
        pass
    for _ in range(100):  # the server notices, and stops following (only)
        if "(it runs on) was stopped" in caplog.text:
            break
        await asyncio.sleep(0.1)
    assert f"following command '{command_id}' of {sandbox_id} (it runs on) was stopped" in (
        caplog.text
    )
    status, found = await background(jp_fetch, "GET", sandbox_id, command_id)
    assert (status, found["running"]) == (200, True), found
    assert "sleep 600" in await processes(jp_fetch, sandbox_id)
    assert await background(jp_fetch, "DELETE", sandbox_id, command_id) == (204, None)
