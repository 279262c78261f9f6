"""A directory watched over REST, against a real server and a real engine: ``GET
.../files/watch?path=P&recursive=R`` answers Server-Sent Events (ready, a change each, error
when the directory goes), checked against openapi.yaml; what cannot be watched is an ordinary
error answer; a client that hangs up has the watcher in the sandbox stopped. The core is tested
in tests/sandbox/operations/test_file_watch.py."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from jupyter_sandbox.server_extension import SandboxExtension
from tests.server_extension.conftest import Fetch, api
from tests.server_extension.openapi_check import EVENT_STREAM, check_response
from tests.server_extension.test_auth_and_spec import with_named_users
from tests.server_extension.test_background_follow import Followed
from tests.server_extension.test_commands import open_stream, processes
from tests.server_extension.test_execute import new_sandbox
from tests.server_extension.test_snapshots import ALICE, BOB

pytestmark = pytest.mark.integration

IN_THE_PROGRAM = "SandboxFiles.watch_max_entries"  # only the watcher's command line holds it


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    return with_named_users(jp_server_config)


async def files(fetch: Fetch, method: str, sandbox_id: str, *rest: str, **kwargs: Any) -> Any:
    status, answer = await api(fetch, method, sandbox_id, "files", *rest, **kwargs, **ALICE)
    assert status in (200, 201, 204), answer
    return answer


async def next_change(seen: Followed, count: int) -> tuple[str, Any]:
    """The ``count``-th event, once it has come."""
    while len(seen.events) < count:
        seen.arrived.clear()
        await asyncio.wait_for(seen.arrived.wait(), 30)
    return seen.events[count - 1][1:]


async def test_changes_are_streamed_until_the_directory_goes(jp_fetch: Fetch) -> None:
    sandbox_id = await new_sandbox(jp_fetch)
    await files(jp_fetch, "PUT", sandbox_id, params={"path": "w"}, body={"type": "directory"})
    seen = Followed()
    watching = asyncio.ensure_future(
        jp_fetch(
            *("api", "sandboxes", sandbox_id, "files", "watch"),
            params={"path": "w", "recursive": "TRUE"},
            streaming_callback=seen.chunk,
            header_callback=seen.header,
            raise_error=False,
            request_timeout=120,
            **ALICE,
        )
    )
    assert await next_change(seen, 1) == ("ready", {"path": "/workspace/w"})
    content = {"path": "w/sub/f.txt"}
    await files(jp_fetch, "PUT", sandbox_id, "content", params=content, body="hello")
    name, change = await next_change(seen, 2)
    assert (name, change["type"], change["path"]) == ("change", "created", "/workspace/w/sub")
    name, change = await next_change(seen, 3)  # recursive: what is under sub too
    assert (change["type"], change["path"]) == ("created", "/workspace/w/sub/f.txt"), change
    assert change["entry"]["size"] == 5
    await files(jp_fetch, "DELETE", sandbox_id, params={"path": "w"})
    response = await watching
    assert seen.content_type == EVENT_STREAM
    events = [event[1:] for event in seen.events]
    check_response(
        f"/api/sandboxes/{sandbox_id}/files/watch", "GET", response.code, events, EVENT_STREAM
    )
    assert events[-2][1] == {"type": "removed", "path": "/workspace/w", "entry": None}, events
    assert (events[-1][0], events[-1][1]["code"]) == ("error", "file_not_found"), events


async def test_what_cannot_be_watched_is_an_error_answer(jp_fetch: Fetch) -> None:
    sandbox_id = await new_sandbox(jp_fetch)
    await files(jp_fetch, "PUT", sandbox_id, "content", params={"path": "f"}, body="x")
    for params, who, status, code in [
        ({"path": "missing"}, ALICE, 404, "file_not_found"),
        ({"path": "f"}, ALICE, 409, "file_type"),  # a file is in the way of a directory
        ({"recursive": "yes"}, ALICE, 400, "invalid_request"),
        ({}, BOB, 404, "sandbox_not_found"),
    ]:
        answer = await api(jp_fetch, "GET", sandbox_id, "files", "watch", params=params, **who)
        assert (answer[0], answer[1]["code"]) == (status, code), (params, answer)


async def test_a_client_that_leaves_stops_the_watcher(
    jp_fetch: Fetch,
    jp_http_port: int,
    jp_base_url: str,
    extension: SandboxExtension,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="jupyter_sandbox.server_extension.event_stream")
    sandbox_id = await new_sandbox(jp_fetch)
    path = f"{jp_base_url}api/sandboxes/{sandbox_id}/files/watch"
    async with open_stream(jp_http_port, path, b"event: ready"):
        assert any(IN_THE_PROGRAM in line for line in await processes(jp_fetch, sandbox_id))
    for _ in range(100):  # the server notices, and stops the watcher
        if "was stopped" in caplog.text:
            break
        await asyncio.sleep(0.1)
    assert f"the watch of . in {sandbox_id} was stopped" in caplog.text
    assert not any(IN_THE_PROGRAM in line for line in await processes(jp_fetch, sandbox_id))
    assert extension.manager.files.watch_count == 0
