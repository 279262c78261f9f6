"""The refusal line a sandboxed program is shown, and the forwarder's reading of a request's
target for it (no engine: pure functions, and the forwarder's tunnel list on the host)."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jupyter_sandbox.sandbox.network.forwarder import (
    MAX_RULE,
    MAX_TARGET,
    Tunnels,
    refusal_text,
    request_target,
)

# The longest line refusal_text can make: its fixed words, the bounded mode, target, rule and
# remedy (a reason phrase, so it must stay one short header line).
LONGEST = 80 + 40 + MAX_TARGET + 2 * MAX_RULE


def test_the_policy_none_reads_as_the_issue_asks() -> None:
    assert refusal_text("none", "example.com:443") == (
        "jupyter-sandbox: network policy none: example.com:443 not allowed; change it in the "
        "Sandboxes panel or with JUPYTER_SANDBOX_NETWORK"
    )


def test_a_rule_is_named_in_parentheses() -> None:
    assert refusal_text("allowlist", "x.test:80", "not in allowlist").startswith(
        "jupyter-sandbox: network policy allowlist: x.test:80 not allowed (not in allowlist); "
    )


@given(st.text(), st.text(), st.text(), st.text())
def test_any_input_gives_one_bounded_printable_ascii_line(
    mode: str, target: str, rule: str, remedy: str
) -> None:
    line = refusal_text(mode, target, rule, remedy)
    assert len(line) <= LONGEST
    assert all(" " <= c <= "~" for c in line), line


@pytest.mark.parametrize(
    ("head", "target"),
    [
        (b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n", "pypi.org:443"),
        (b"GET http://example.com/simple/ HTTP/1.1\r\n\r\n", "example.com:80"),
        (b"GET http://example.com:8080?q=1 HTTP/1.1\r\n\r\n", "example.com:8080"),
        (b"GET http://user@[2001:db8::1]/ HTTP/1.1\r\n\r\n", "[2001:db8::1]:80"),
        (b"GET http://[2001:db8::1]:81/ HTTP/1.1\r\n\r\n", "[2001:db8::1]:81"),
        (b"GET /relative HTTP/1.1\r\n\r\n", "?"),
        (b"GET ftp://example.com/ HTTP/1.1\r\n\r\n", "?"),
        (b"garbage", "?"),
        (b"", "?"),
    ],
)
def test_the_target_of_a_request(head: bytes, target: str) -> None:
    assert request_target(head) == target


def test_with_no_host_proxy_attached_a_client_is_refused_at_once() -> None:
    """Under the policy none no tunnel ever comes: waiting for one would only delay the 403."""
    started = time.monotonic()
    assert Tunnels().take(timeout=5.0) is None
    assert time.monotonic() - started < 1.0


def test_with_every_tunnel_busy_a_client_waits_for_the_next() -> None:
    tunnels = Tunnels()
    ours, theirs = socket.socketpair()
    try:
        tunnels.add(ours)
        assert tunnels.take(timeout=1.0) is ours
        assert tunnels.attached_before
        started = time.monotonic()
        assert tunnels.take(timeout=0.3) is None  # one is busy: the proxy may send another
        assert time.monotonic() - started >= 0.3
        tunnels.done(ours)
    finally:
        theirs.close()


def test_after_a_host_proxy_attached_a_client_waits_for_its_next_tunnel() -> None:
    """Every tunnel handed out was given back and the proxy's next has not come yet (it sends
    one for each it handed out, later under load): the client waits for it, up to its limit."""
    tunnels = Tunnels()
    first, first_peer = socket.socketpair()
    second, second_peer = socket.socketpair()
    try:
        tunnels.add(first)
        assert tunnels.take(timeout=1.0) is first
        tunnels.done(first)
        threading.Timer(0.3, tunnels.add, (second,)).start()
        assert tunnels.take(timeout=5.0) is second
        tunnels.done(second)
        started = time.monotonic()
        assert tunnels.take(timeout=0.3) is None  # none came: refused at the limit
        assert time.monotonic() - started >= 0.3
    finally:
        first_peer.close()
        second_peer.close()
