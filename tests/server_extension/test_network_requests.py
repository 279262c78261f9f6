"""The policy mode ask through the REST API, on real sandboxes of both runtimes: requests held by
the sandbox's host proxy are listed with the sandbox and kernel they came from, and decided
once, for the sandbox, or denied; an undecided one is denied at ask_timeout with a message that
says so; the audit says who decided. The test servers listen on the host's 127.0.0.1, reached
through the test-only settings (tests/sandbox/network/servers.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from jupyter_sandbox.sandbox.manager import default_owner
from jupyter_sandbox.server_extension import SandboxExtension
from tests.conftest import BOTH_RUNTIMES
from tests.sandbox.network.servers import RecordingServer, recording_server
from tests.server_extension.conftest import Fetch, api
from tests.server_extension.test_network_handlers import fetch_inside

pytestmark = pytest.mark.integration
ASK = {"mode": "ask", "allow": [], "deny": ["denied.test"]}


@pytest.fixture
def ask_timeout() -> float:
    """NetworkSettings.ask_timeout of the test's server (a test parametrizes it to change it)."""
    return 60.0


@pytest.fixture
def max_pending() -> int:
    return 8


@pytest.fixture
def jp_server_config(
    jp_server_config: dict[str, Any], ask_timeout: float, max_pending: int
) -> dict[str, Any]:
    return {
        **jp_server_config,
        "NetworkSettings": {
            "allow_loopback_for_tests": True,
            "test_host_addresses": {"allowed.test": "127.0.0.1", "other.test": "127.0.0.1"},
            "ask_timeout": ask_timeout,
            "max_pending_requests": max_pending,
        },
    }


@pytest.fixture
def server() -> Iterator[RecordingServer]:
    with recording_server("127.0.0.1") as s:
        yield s


async def ask_sandbox(fetch: Fetch, runtime: str, **kwargs: Any) -> str:
    status, made = await api(fetch, "POST", body={"runtime": runtime, "network": ASK}, **kwargs)
    assert status == 201, made
    assert made["network"] == {"policy": "ask"}
    return str(made["id"])


async def held(fetch: Fetch, sandbox_id: str, count: int = 1, **kwargs: Any) -> list[Any]:
    """The sandbox's held requests, once there are ``count`` (polled, 60 s at most)."""
    for _ in range(600):
        status, answer = await api(fetch, "GET", sandbox_id, "network", "requests", **kwargs)
        assert status == 200, answer
        if len(answer["requests"]) == count:
            return list(answer["requests"])
        await asyncio.sleep(0.1)
    raise AssertionError(f"the sandbox never held {count} request(s): {answer}")


async def decide(fetch: Fetch, sandbox_id: str, request_id: str, decision: str) -> Any:
    path = (sandbox_id, "network", "requests", request_id)
    status, answer = await api(fetch, "POST", *path, body={"decision": decision})
    assert status == 200, answer
    return answer


@pytest.mark.parametrize("runtime", BOTH_RUNTIMES)
async def test_held_requests_are_allowed_once_for_the_sandbox_or_denied(
    jp_fetch: Fetch, extension: SandboxExtension, server: RecordingServer, runtime: str
) -> None:
    sandbox_id = await ask_sandbox(jp_fetch, runtime)
    url = f"http://allowed.test:{server.port}/"
    assert await api(jp_fetch, "GET", sandbox_id, "network", "requests") == (
        200,
        {"requests": []},
    )

    # Once: this request goes on; the policy is unchanged.
    fetching = asyncio.create_task(fetch_inside(extension, sandbox_id, url))
    [request] = await held(jp_fetch, sandbox_id)
    assert (request["sandbox"], request["host"], request["port"]) == (
        sandbox_id,
        "allowed.test",
        server.port,
    )
    assert request["kernel"] is None  # made over REST: no kernel attached
    assert server.connections == 0  # held, never connected
    decided = await decide(jp_fetch, sandbox_id, request["request_id"], "once")
    assert (decided["decision"], decided["by"]) == ("once", default_owner())
    assert await fetching == "200"
    status, policy = await api(jp_fetch, "GET", sandbox_id, "network")
    assert (status, policy["mode"], policy["allow"]) == (200, "ask", [])

    # Deny: the program is told who denied it.
    fetching = asyncio.create_task(fetch_inside(extension, sandbox_id, url))
    [request] = await held(jp_fetch, sandbox_id)
    await decide(jp_fetch, sandbox_id, request["request_id"], "deny")
    assert await fetching == f"403 denied by {default_owner()}"

    # For the sandbox: host:port joins the policy, and the next request is not asked.
    fetching = asyncio.create_task(fetch_inside(extension, sandbox_id, url))
    [request] = await held(jp_fetch, sandbox_id)
    await decide(jp_fetch, sandbox_id, request["request_id"], "sandbox")
    assert await fetching == "200"
    status, policy = await api(jp_fetch, "GET", sandbox_id, "network")
    assert policy["allow"] == [f"allowed.test:{server.port}"]
    assert await fetch_inside(extension, sandbox_id, url) == "200"

    # Decided: no longer there to decide.
    path = (sandbox_id, "network", "requests", request["request_id"])
    status, error = await api(jp_fetch, "POST", *path, body={"decision": "deny"})
    assert (status, error["code"]) == (404, "network_request_not_found"), error
    # A deny pattern is never a question.
    denied = await fetch_inside(extension, sandbox_id, f"http://denied.test:{server.port}/")
    assert denied == "403 deny denied.test"

    status, audit = await api(jp_fetch, "GET", sandbox_id, "network", "audit")
    assert status == 200
    decisions = [
        (e["allowed"], e.get("decision"), e.get("by"), "decided_at" in e) for e in audit["entries"]
    ]
    owner = default_owner()
    assert decisions == [
        (True, "once", owner, True),
        (False, "deny", owner, True),
        (True, "sandbox", owner, True),
        (True, None, None, False),
        (False, None, None, False),
    ]


@pytest.mark.parametrize("ask_timeout", [1.0])
@pytest.mark.parametrize("runtime", BOTH_RUNTIMES)
@pytest.mark.checklist(
    row=113,
    attack="a request held by an ask policy that nobody decides (the owner away)",
    expected="denied at NetworkSettings.ask_timeout with a message naming the timeout; never "
    "connected; audited as decided by timeout",
)
async def test_an_undecided_request_is_denied_at_the_timeout(
    jp_fetch: Fetch,
    extension: SandboxExtension,
    server: RecordingServer,
    runtime: str,
    observe: Callable[..., None],
) -> None:
    sandbox_id = await ask_sandbox(jp_fetch, runtime)
    answer = await fetch_inside(extension, sandbox_id, f"http://other.test:{server.port}/")
    assert answer == "403 the owner did not decide within 1 s (NetworkSettings.ask_timeout)"
    assert server.connections == 0
    status, audit = await api(jp_fetch, "GET", sandbox_id, "network", "audit")
    assert status == 200
    [entry] = audit["entries"]
    assert (entry["allowed"], entry["decision"], entry["by"]) == (False, "timeout", "timeout")
    assert await api(jp_fetch, "GET", sandbox_id, "network", "requests") == (
        200,
        {"requests": []},
    )
    observe(f"the sandbox's code saw: {answer}; audit: decision timeout, by timeout")


@pytest.mark.parametrize(
    ("path", "body", "says"),
    [
        ("network/requests/0123456789abcdef", {"decision": "always"}, "decision must be one of"),
        ("network/requests/0123456789abcdef", {}, "decision must be one of"),
        ("network/requests/0123456789abcdef", {"decision": "once", "x": 1}, "unknown field"),
        ("network/requests/0123456789abcdef", "[]", "must be a JSON object"),
    ],
)
async def test_bad_decisions_say_what_to_fix(
    jp_fetch: Fetch, path: str, body: Any, says: str
) -> None:
    status, error = await api(jp_fetch, "POST", "0123456789ab", *path.split("/"), body=body)
    assert status == 400, error
    assert says in error["message"]


async def test_a_bad_follow_argument_and_unknown_sandboxes(jp_fetch: Fetch) -> None:
    status, error = await api(
        jp_fetch, "GET", "0123456789ab", "network", "requests", params={"follow": "yes"}
    )
    assert (status, "follow must be true or false" in error["message"]) == (400, True)
    status, error = await api(jp_fetch, "GET", "0123456789ab", "network", "requests")
    assert (status, error["code"]) == (404, "sandbox_not_found")
    path = ("0123456789ab", "network", "requests", "0123456789abcdef")
    status, error = await api(jp_fetch, "POST", *path, body={"decision": "once"})
    assert (status, error["code"]) == (404, "sandbox_not_found")
