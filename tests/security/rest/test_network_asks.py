"""Rows 110-112: the requests an ask policy holds are decided by their owner alone, never by
another user or by the sandbox itself, and a sandbox cannot pile them up (row 113, the timeout,
is tests/server_extension/test_network_requests.py). Real sandboxes on both runtimes, a real
server whose tokens name their users; the upstream is a test server on the host's 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from jupyter_sandbox.sandbox.backends.base import ExecOptions
from jupyter_sandbox.server_extension import SandboxExtension
from tests.conftest import BOTH_RUNTIMES
from tests.sandbox.network.servers import FETCH, RecordingServer, recording_server
from tests.server_extension.conftest import Fetch, api
from tests.server_extension.test_auth_and_spec import with_named_users
from tests.server_extension.test_network_requests import held

pytestmark = pytest.mark.integration
ALICE = {"headers": {"Authorization": "token alice"}}
BOB = {"headers": {"Authorization": "token bob"}}
MAX_PENDING = 2

# Run in the sandbox with the decision's URL: POSTs a decision with alice's own token (which
# this server takes from anyone who reaches it), straight to the server's port on 127.0.0.1
# and through the sandbox's proxy; prints what each attempt got.
DECIDE_FROM_INSIDE = r"""
import json, socket, sys, urllib.error, urllib.request
url, port = sys.argv[1], int(sys.argv[2])
try:
    # What answers, if anything does: the server's HTTP would begin "HTTP/".
    with socket.create_connection(("127.0.0.1", port), timeout=5) as direct:
        direct.sendall(b"GET / HTTP/1.0\r\n\r\n")
        print("direct: connected, answered", repr(direct.recv(16)))
except OSError as e:
    print("direct:", type(e).__name__)
request = urllib.request.Request(
    url, data=json.dumps({"decision": "sandbox"}).encode(), method="POST",
    headers={"Authorization": "token alice", "Content-Type": "application/json"},
)
try:
    print("proxy:", urllib.request.urlopen(request, timeout=60).status)
except urllib.error.HTTPError as e:
    print("proxy:", e.code, e.headers.get("X-Jupyter-Sandbox-Denied"))
"""
# Looks for the proxy's files of held requests anywhere the sandbox can see.
FIND_ASKS = "find / -xdev \\( -name 'egress-asks' -o -name '*.decision' \\) -print 2>/dev/null"


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    return {
        **with_named_users(jp_server_config),
        "NetworkSettings": {
            "allow_loopback_for_tests": True,
            "test_host_addresses": {"allowed.test": "127.0.0.1"},
            "max_pending_requests": MAX_PENDING,
        },
    }


@pytest.fixture
def server() -> Iterator[RecordingServer]:
    with recording_server("127.0.0.1") as s:
        yield s


async def run_inside(extension: SandboxExtension, sandbox_id: str, argv: list[str]) -> str:
    result = await extension.manager.exec("alice", sandbox_id, argv, ExecOptions(timeout=90))
    return result.stdout.decode().strip()


async def alices_held_request(
    jp_fetch: Fetch, extension: SandboxExtension, runtime: str, url: str
) -> tuple[str, dict[str, Any], asyncio.Task[str]]:
    """Alice's sandbox (policy ask), a request of its code held, and the code's task."""
    body = {"runtime": runtime, "network": {"mode": "ask"}}
    status, made = await api(jp_fetch, "POST", body=body, **ALICE)
    assert status == 201, made
    sandbox_id = str(made["id"])
    fetching = asyncio.create_task(run_inside(extension, sandbox_id, ["python", "-c", FETCH, url]))
    [request] = await held(jp_fetch, sandbox_id, **ALICE)
    return sandbox_id, request, fetching


@pytest.mark.parametrize("runtime", BOTH_RUNTIMES)
@pytest.mark.checklist(
    row=110,
    attack="user B lists and decides (once, sandbox, deny) a request held for user A's sandbox, "
    "with its real request id",
    expected="404 on each, as for a sandbox that does not exist; the request still waits for A, "
    "and A's decision is the one that counts",
)
async def test_row110_another_owner_cannot_decide_a_held_request(
    jp_fetch: Fetch,
    extension: SandboxExtension,
    server: RecordingServer,
    runtime: str,
    observe: Callable[..., None],
) -> None:
    url = f"http://allowed.test:{server.port}/"
    sandbox_id, request, fetching = await alices_held_request(jp_fetch, extension, runtime, url)
    path = (sandbox_id, "network", "requests")
    status, error = await api(jp_fetch, "GET", *path, **BOB)
    assert (status, error["code"]) == (404, "sandbox_not_found"), error
    for decision in ("once", "sandbox", "deny"):
        body = {"decision": decision}
        status, error = await api(jp_fetch, "POST", *path, request["request_id"], body=body, **BOB)
        assert (status, error["code"]) == (404, "sandbox_not_found"), error
    assert [r["request_id"] for r in await held(jp_fetch, sandbox_id, **ALICE)] == [
        request["request_id"]
    ]
    status, _ = await api(
        jp_fetch, "POST", *path, request["request_id"], body={"decision": "deny"}, **ALICE
    )
    assert status == 200
    assert await fetching == "403 denied by alice"
    assert server.connections == 0
    observe("bob's list and 3 decisions: 404 each; the request waited for alice, who denied it", 4)


@pytest.mark.parametrize("runtime", BOTH_RUNTIMES)
@pytest.mark.checklist(
    row=111,
    attack="code in a sandbox decides its own held request: looks for the proxy's files, POSTs a "
    "decision with the owner's token straight to the server's port and through its own proxy",
    expected="nothing of the held requests is visible inside; the server's port is not "
    "reachable; through the proxy the POST is itself a held request the owner sees and denies; "
    "the first request still waits",
)
async def test_row111_a_sandbox_cannot_decide_its_own_requests(
    jp_fetch: Fetch,
    extension: SandboxExtension,
    server: RecordingServer,
    jp_http_port: int,
    jp_base_url: str,
    runtime: str,
    observe: Callable[..., None],
) -> None:
    url = f"http://allowed.test:{server.port}/"
    sandbox_id, request, fetching = await alices_held_request(jp_fetch, extension, runtime, url)
    assert await run_inside(extension, sandbox_id, ["sh", "-c", FIND_ASKS]) == ""
    # The worst case: the code knows the request's id and the server's address.
    decision_url = (
        f"http://allowed.test:{jp_http_port}{jp_base_url}api/sandboxes/{sandbox_id}/network/"
        f"requests/{request['request_id']}"
    )
    argv = ["python", "-c", DECIDE_FROM_INSIDE, decision_url, str(jp_http_port)]
    attempt = asyncio.create_task(run_inside(extension, sandbox_id, argv))
    first, second = await held(jp_fetch, sandbox_id, 2, **ALICE)
    assert first["request_id"] == request["request_id"]
    assert (second["host"], second["port"]) == ("allowed.test", jp_http_port)
    path = (sandbox_id, "network", "requests", second["request_id"])
    status, _ = await api(jp_fetch, "POST", *path, body={"decision": "deny"}, **ALICE)
    assert status == 200
    printed = (await attempt).splitlines()
    # Nothing listens on that port in the sandbox's own loopback. Once in a CI run with two
    # test workers the connect succeeded all the same (runc): what matters here is that the
    # server cannot be what answers, so a connection is shown with what it answered.
    assert printed[0] in (
        "direct: ConnectionRefusedError",
        "direct: OSError",
        "direct: TimeoutError",
    ) or (printed[0].startswith("direct: connected") and "HTTP/" not in printed[0]), printed
    assert printed[1] == "proxy: 403 denied by alice"
    # The first request still waits for its owner.
    [still] = await held(jp_fetch, sandbox_id, **ALICE)
    assert still["request_id"] == request["request_id"]
    path = (sandbox_id, "network", "requests", request["request_id"])
    status, _ = await api(jp_fetch, "POST", *path, body={"decision": "deny"}, **ALICE)
    assert status == 200
    assert await fetching == "403 denied by alice"
    status, policy = await api(jp_fetch, "GET", sandbox_id, "network", **ALICE)
    assert policy["allow"] == []
    observe(f"no file of held requests inside; {printed[0]}; {printed[1]}; policy unchanged", 3)


@pytest.mark.parametrize("runtime", BOTH_RUNTIMES)
@pytest.mark.checklist(
    row=112,
    attack="a sandbox makes more requests to unknown hosts than max_pending_requests, to flood "
    "its owner with questions",
    expected="past the cap each is refused at once with a message naming it; those held stay "
    "decidable",
)
async def test_row112_held_requests_are_capped(
    jp_fetch: Fetch,
    extension: SandboxExtension,
    server: RecordingServer,
    runtime: str,
    observe: Callable[..., None],
) -> None:
    url = f"http://allowed.test:{server.port}/"
    sandbox_id, _, fetching = await alices_held_request(jp_fetch, extension, runtime, url)
    more = asyncio.create_task(run_inside(extension, sandbox_id, ["python", "-c", FETCH, url]))
    requests = await held(jp_fetch, sandbox_id, MAX_PENDING, **ALICE)
    refused = await run_inside(extension, sandbox_id, ["python", "-c", FETCH, url])
    assert refused == (
        f"403 {MAX_PENDING} requests of this sandbox already wait for the owner's decision "
        "(NetworkSettings.max_pending_requests); try again later"
    )
    for each in requests:
        path = (sandbox_id, "network", "requests", each["request_id"])
        status, _ = await api(jp_fetch, "POST", *path, body={"decision": "once"}, **ALICE)
        assert status == 200
    assert [await fetching, await more] == ["200", "200"]
    observe(f"request {MAX_PENDING + 1} refused at once: {refused}; the {MAX_PENDING} held allowed")
