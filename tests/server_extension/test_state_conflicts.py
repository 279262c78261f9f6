"""What the API fuzzer found (issue 31): a state conflict is a 409 that says what to do, and a
request that cannot go on says so at once rather than wait; a route answers a method it lacks
with 405 and Allow, never 500. On both runtimes, against the real server and engine."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest

from jupyter_sandbox.sandbox.manager import default_owner
from jupyter_sandbox.server_extension import SandboxExtension
from tests.server_extension.conftest import Fetch, api

pytestmark = pytest.mark.integration

# Seconds the code of a run in flight would take to end on its own: far beyond the request's
# own time limit, so that an answer at all proves the run was not waited out.
LONG_CODE = "open('/workspace/started', 'w').close(); import time; time.sleep(600)"
REQUEST_TIMEOUT = 60.0


async def started(extension: SandboxExtension, sandbox_id: str) -> bool:
    """Whether LONG_CODE runs (it made its file)."""
    listing = await extension.manager.files.list(default_owner(), sandbox_id, "/workspace")
    return any(entry["name"] == "started" for entry in listing["entries"])


async def create(fetch: Fetch, runtime: str) -> str:
    status, model = await api(fetch, "POST", body={"runtime": runtime})
    assert status == 201, model
    return str(model["id"])


@pytest.mark.checklist(
    row=61,
    attack="actions in the wrong state: resume a running sandbox, pause a paused one, restart "
    "it, measure it, change its network or run a command in it, and PUT network on a stopped one",
    expected="409 sandbox_conflict naming the state and the fix, before the engine is asked "
    "(no 500 with the engine's message)",
)
async def test_actions_in_the_wrong_state_are_409s_saying_what_to_do(
    jp_fetch: Fetch, extension: SandboxExtension, runtime: str, observe: Callable[..., None]
) -> None:
    sandbox_id = await create(jp_fetch, runtime)

    async def refused(method: str, *path: str, body: Any = None) -> str:
        status, error = await api(jp_fetch, method, sandbox_id, *path, body=body)
        assert (status, error["code"]) == (409, "sandbox_conflict"), error
        return str(error["message"])

    said = await refused("POST", "resume")
    assert said == f"sandbox {sandbox_id} is running: only a paused sandbox can be resumed"

    status, model = await api(jp_fetch, "POST", sandbox_id, "pause")
    assert (status, model["status"]) == (200, "paused")
    assert await refused("POST", "pause") == f"sandbox {sandbox_id} is paused: it is paused already"
    paused = f"sandbox {sandbox_id} is paused: resume it first"
    assert await refused("POST", "restart") == paused
    assert await refused("GET", "stats") == paused
    assert await refused("POST", "commands", body={"command": "true"}) == paused
    assert "resume it before changing its network" in await refused(
        "PUT", "network", body={"mode": "none"}
    )

    status, model = await api(jp_fetch, "POST", sandbox_id, "resume")
    assert (status, model["status"]) == (200, "running")
    await extension.manager.backend.stop(sandbox_id, timeout=1)
    stopped = await refused("PUT", "network", body={"mode": "open"})
    assert stopped.startswith(f"sandbox {sandbox_id} is exited"), stopped
    assert "start a new one" in await refused("POST", "resume")
    observe("9 actions in the wrong state: 409 sandbox_conflict with the fix, each", 9)


@pytest.mark.checklist(
    row=62,
    attack="a sandbox paused while its code runs (POST /execute of a 600 s sleep), then "
    "DELETE of the paused sandbox",
    expected="the run answers 409 at once (paused: resume it); the removal thaws the sandbox "
    "and removes it without waiting out the engine (no runtime processes killed)",
)
async def test_a_request_that_cannot_go_on_on_a_paused_sandbox_says_so(
    jp_fetch: Fetch,
    extension: SandboxExtension,
    runtime: str,
    caplog: pytest.LogCaptureFixture,
    observe: Callable[..., None],
) -> None:
    sandbox_id = await create(jp_fetch, runtime)
    run = asyncio.ensure_future(
        api(
            jp_fetch,
            "POST",
            sandbox_id,
            "execute",
            body={"code": LONG_CODE, "timeout": 600},
            request_timeout=REQUEST_TIMEOUT,
        )
    )
    for _ in range(300):  # a minute at most for the code to start
        if run.done() or await started(extension, sandbox_id):
            break
        await asyncio.sleep(0.2)
    status, model = await api(jp_fetch, "POST", sandbox_id, "pause")
    assert (status, model["status"]) == (200, "paused")
    status, error = await run  # before the request's time limit, far before the code's end
    assert (status, error["code"]) == (409, "sandbox_conflict"), error
    assert "the sandbox was paused" in error["message"]
    assert "resume" in error["message"]

    caplog.set_level(logging.WARNING, logger="jupyter_sandbox.sandbox.backends.docker.removal")
    status, _ = await api(jp_fetch, "DELETE", sandbox_id, request_timeout=REQUEST_TIMEOUT)
    assert status == 204
    # A frozen runsc sandbox used to hold its removal until the engine's time limit, after
    # which its runtime processes were killed (10 s and more, the request hanging meanwhile).
    assert "ending its runtime processes" not in caplog.text
    status, _ = await api(jp_fetch, "GET", sandbox_id)
    assert status == 404
    observe("run in flight: 409 once paused; paused sandbox removed without the kill path", 2)


@pytest.mark.checklist(
    row=63,
    attack="methods a route does not have (TRACE, PUT on a list, DELETE on one port's link)",
    expected="405 with Allow naming the route's methods; never 500",
)
async def test_a_method_a_route_lacks_is_405_with_allow(
    jp_fetch: Fetch, observe: Callable[..., None]
) -> None:
    sandbox_id = "0123456789ab"
    for method, path, allowed in [
        ("DELETE", (sandbox_id, "ports", "8000"), "GET, OPTIONS"),
        ("PUT", (), "GET, POST, OPTIONS"),
        ("TRACE", (sandbox_id, "stats"), "GET, OPTIONS"),
    ]:
        response = await jp_fetch(
            "api",
            "sandboxes",
            *path,
            method=method,
            body=b"" if method == "PUT" else None,
            allow_nonstandard_methods=True,
            raise_error=False,
        )
        assert (response.code, response.headers.get("Allow")) == (405, allowed), (method, path)
    observe("DELETE of a port's link (a 500 before), PUT, TRACE: 405 with Allow", 3)
