"""The policy mode ask through the real forwarder and host proxy, both on the host (no engine):
a request to a host the policy neither allows nor denies is held, listed, and decided once,
for the sandbox or denied; undecided it times out; too many are refused at once. The same
through real sandboxes and the REST API: tests/server_extension/test_network_requests.py."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

from jupyter_sandbox.protocol.errors import InvalidRequestError, NetworkRequestNotFoundError
from jupyter_sandbox.sandbox.network import NetworkPolicy, read_audit
from jupyter_sandbox.sandbox.network.asks import ASKS_DIR, decide, pending_requests
from jupyter_sandbox.sandbox.network.policy import policy_of_state
from tests.sandbox.network.servers import RecordingServer, recording_server
from tests.sandbox.network.test_chain import Chain, make_chain, status

ASK = {"mode": "ask", "allow": ["allowed.test:1"]}


@pytest.fixture(scope="module")
def chain() -> Iterator[Chain]:
    with make_chain(ask_timeout=30.0, max_pending_requests=2) as made:
        yield made


@pytest.fixture
def server() -> Iterator[RecordingServer]:
    with recording_server("127.0.0.1") as s:
        yield s


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4) as executor:
        yield executor


def until(found: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := found()):
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.01)
    return value


def held(chain: Chain, count: int = 1) -> list[dict[str, Any]]:
    """Wait until the proxy holds ``count`` requests; them."""

    def found() -> list[dict[str, Any]] | None:
        pending = pending_requests(chain.directory.root)
        return pending if len(pending) == count else None

    found_requests: list[dict[str, Any]] = until(found)
    return found_requests


def test_a_request_is_held_until_allowed_once_then_asked_again(
    chain: Chain, server: RecordingServer, pool: ThreadPoolExecutor
) -> None:
    chain.set_policy(ASK)
    url = f"http://allowed.test:{server.port}/once"
    answer: Future[bytes] = pool.submit(chain.get, url)
    [request] = held(chain)
    assert (request["host"], request["port"], request["method"]) == (
        "allowed.test",
        server.port,
        "GET",
    )
    assert server.connections == 0  # held: nothing reached the upstream
    decided = decide(chain.directory, request["request_id"], "once", "alice")
    assert decided["decision"] == "once"
    assert status(answer.result(30)) == 200
    entry = read_audit(chain.directory.root)[-1]
    assert entry["allowed"] is True
    assert (entry["decision"], entry["by"], entry["rule"]) == (
        "once",
        "alice",
        "allowed once by alice",
    )
    assert entry["decided_at"] >= request["asked_at"]
    # Once is this request only: the next is asked again, and the policy is as it was.
    again: Future[bytes] = pool.submit(chain.get, url)
    [second] = held(chain)
    assert second["request_id"] != request["request_id"]
    decide(chain.directory, second["request_id"], "deny", "alice")
    assert status(again.result(30)) == 403
    assert policy_of_state(chain.directory.read_state()) == NetworkPolicy.parse(ASK)


def test_allowed_for_the_sandbox_is_kept_in_the_policy(
    chain: Chain, server: RecordingServer, pool: ThreadPoolExecutor
) -> None:
    chain.set_policy(ASK)
    url = f"http://allowed.test:{server.port}/sandbox"
    answer: Future[bytes] = pool.submit(chain.get, url)
    [request] = held(chain)
    decide(chain.directory, request["request_id"], "sandbox", "alice")
    assert status(answer.result(30)) == 200
    policy = policy_of_state(chain.directory.read_state())
    assert policy.as_dict()["allow"] == ["allowed.test:1", f"allowed.test:{server.port}"]
    entry = read_audit(chain.directory.root)[-1]
    assert (entry["decision"], entry["by"]) == ("sandbox", "alice")
    # The next request passes without asking.
    assert status(chain.get(url)) == 200
    assert read_audit(chain.directory.root)[-1]["rule"] == f"allow allowed.test:{server.port}"
    assert "decision" not in read_audit(chain.directory.root)[-1]


def test_a_denied_request_is_refused_saying_who_denied_it_and_never_looked_up(
    chain: Chain, pool: ThreadPoolExecutor
) -> None:
    chain.set_policy(ASK)
    # A name nothing resolves: held all the same, since nothing is looked up before the owner
    # says yes (a held name is no DNS channel out of the sandbox).
    answer: Future[bytes] = pool.submit(chain.get, "http://nowhere.invalid/")
    [request] = held(chain)
    decide(chain.directory, request["request_id"], "deny", "alice")
    refused = answer.result(30)
    assert status(refused) == 403
    assert b"denied by alice" in refused
    entry = read_audit(chain.directory.root)[-1]
    assert (entry["allowed"], entry["decision"], entry["by"]) == (False, "deny", "alice")
    assert "address" not in entry


def test_a_decided_or_unknown_request_cannot_be_decided(
    chain: Chain, server: RecordingServer, pool: ThreadPoolExecutor
) -> None:
    chain.set_policy(ASK)
    answer: Future[bytes] = pool.submit(chain.get, f"http://allowed.test:{server.port}/")
    [request] = held(chain)
    request_id = request["request_id"]
    decide(chain.directory, request_id, "once", "alice")
    with pytest.raises(NetworkRequestNotFoundError):
        decide(chain.directory, request_id, "deny", "mallory")
    assert status(answer.result(30)) == 200
    for unknown in ("0123456789abcdef", "../state", "x" * 300, request_id):
        with pytest.raises(NetworkRequestNotFoundError):
            decide(chain.directory, unknown, "once", "alice")
    with pytest.raises(InvalidRequestError):
        decide(chain.directory, request_id, "always", "alice")
    assert sorted(p.name for p in (chain.directory.root / ASKS_DIR).iterdir()) == []


def test_allowed_hosts_and_deny_patterns_are_never_asked(
    chain: Chain, server: RecordingServer
) -> None:
    chain.set_policy({"mode": "ask", "allow": ["allowed.test"], "deny": ["*.no.invalid"]})
    assert status(chain.get(f"http://allowed.test:{server.port}/")) == 200
    assert status(chain.get("http://x.no.invalid/")) == 403
    assert status(chain.get("http://127.0.0.1/")) == 403  # an address: never a question
    assert pending_requests(chain.directory.root) == []


def test_a_policy_change_decides_what_waits(chain: Chain, pool: ThreadPoolExecutor) -> None:
    chain.set_policy(ASK)
    answer: Future[bytes] = pool.submit(chain.get, "http://nowhere.invalid/")
    held(chain)
    chain.set_policy("none")
    assert status(answer.result(30)) == 403
    entry = read_audit(chain.directory.root)[-1]
    assert (entry["decision"], entry["rule"]) == ("policy", "network policy is none")


def test_a_request_whose_program_leaves_is_no_longer_asked_about(chain: Chain) -> None:
    chain.set_policy(ASK)
    with socket.create_connection(("127.0.0.1", chain.port), timeout=30) as sock:
        sock.sendall(b"GET http://gone.invalid/ HTTP/1.1\r\nHost: gone.invalid\r\n\r\n")
        [request] = held(chain)
    until(lambda: pending_requests(chain.directory.root) == [])
    entry = until(
        lambda: [e for e in read_audit(chain.directory.root) if e["host"] == "gone.invalid"]
    )
    assert (entry[-1]["decision"], entry[-1]["allowed"]) == ("withdrawn", False)
    with pytest.raises(NetworkRequestNotFoundError):
        decide(chain.directory, request["request_id"], "once", "alice")


def test_pending_requests_are_capped_and_the_refusal_says_so(
    chain: Chain, pool: ThreadPoolExecutor
) -> None:
    chain.set_policy(ASK)
    waiting = [pool.submit(chain.get, f"http://n{i}.invalid/") for i in range(2)]
    requests = held(chain, 2)
    refused = chain.get("http://n2.invalid/")  # answered at once, not held
    assert status(refused) == 403
    assert b"2 requests of this sandbox already wait" in refused
    assert b"max_pending_requests" in refused
    for request in requests:
        decide(chain.directory, request["request_id"], "deny", "alice")
    assert [status(answer.result(30)) for answer in waiting] == [403, 403]


def test_an_undecided_request_is_denied_at_the_timeout_saying_so(
    pool: ThreadPoolExecutor,
) -> None:
    with make_chain(ask_timeout=0.5) as chain:
        chain.set_policy(ASK)
        refused = chain.get("http://late.invalid/")
        assert status(refused) == 403
        assert b"did not decide within 0.5 s (NetworkSettings.ask_timeout)" in refused
        entry = read_audit(chain.directory.root)[-1]
        assert (entry["decision"], entry["by"], entry["allowed"]) == ("timeout", "timeout", False)
        assert pending_requests(chain.directory.root) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ask", {"mode": "ask", "allow": [], "deny": []}),
        (
            "ask,pypi.org,!evil.pypi.org",
            {"mode": "ask", "allow": ["pypi.org"], "deny": ["evil.pypi.org"]},
        ),
        ("pypi.org, ASK", {"mode": "ask", "allow": ["pypi.org"], "deny": []}),
    ],
)
def test_the_text_form_names_ask_among_its_patterns(text: str, expected: dict[str, Any]) -> None:
    assert NetworkPolicy.from_text(text).as_dict() == expected


def test_ask_decides_allows_denies_or_asks() -> None:
    policy = NetworkPolicy.parse({"mode": "ask", "allow": ["a.test"], "deny": ["b.test"]})
    assert policy.decide("a.test", 443).allowed
    assert not policy.decide("b.test", 443).ask
    assert not policy.decide("10.0.0.1", 443).ask
    asked = policy.decide("c.test", 443)
    assert (asked.allowed, asked.ask) == (False, True)
    widened = policy.allowing("c.test", 443)
    assert widened.decide("c.test", 443).allowed
    assert widened.decide("c.test", 80).ask
    assert widened.allowing("c.test", 443) is widened
    assert NetworkPolicy.parse("open").allowing("c.test", 443) == NetworkPolicy.parse("open")
