"""The proxy's reading of a request head: what it forwards, and what it refuses (no engine)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from jupyter_sandbox.sandbox.network.request_head import (
    MAX_HEAD,
    BadRequest,
    ClientClosed,
    ProxyRequest,
    answer,
    is_address,
    parse_head,
    read_head,
)


def head(*lines: str) -> bytes:
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def test_connect_names_host_and_port() -> None:
    request = parse_head(head("CONNECT PyPI.org.:443 HTTP/1.1", "Host: pypi.org:443"))
    assert request == ProxyRequest("CONNECT", "pypi.org", 443, b"")


def test_connect_to_an_ipv6_literal() -> None:
    assert parse_head(head("CONNECT [2001:db8::1]:443 HTTP/1.1")).host == "2001:db8::1"


@pytest.mark.parametrize(
    "target", ["pypi.org", "pypi.org:", "pypi.org:https", "pypi.org:0", "pypi.org:65536"]
)
def test_connect_without_a_valid_port_is_refused(target: str) -> None:
    with pytest.raises(BadRequest, match="CONNECT needs host:port"):
        parse_head(head(f"CONNECT {target} HTTP/1.1"))


def test_plain_http_is_rewritten_for_the_server_the_policy_judged() -> None:
    request = parse_head(
        head(
            "GET http://Example.COM:8080/a/b?c=1&d=2 HTTP/1.1",
            "Host: metadata.google.internal",  # a smuggled Host must not reach the server
            "Proxy-Authorization: Basic c2VjcmV0",
            "Proxy-Connection: keep-alive",
            "Connection: keep-alive",
            "Keep-Alive: timeout=5",
            "Accept: */*",
            "User-Agent: pip/24",
        )
    )
    assert (request.method, request.host, request.port) == ("GET", "example.com", 8080)
    assert request.head == head(
        "GET /a/b?c=1&d=2 HTTP/1.1",
        "Host: example.com:8080",
        "Accept: */*",
        "User-Agent: pip/24",
        "Connection: close",
    )


def test_the_default_port_and_an_empty_path() -> None:
    request = parse_head(head("HEAD http://example.com HTTP/1.0"))
    assert (request.port, request.head) == (
        80,
        head("HEAD / HTTP/1.0", "Host: example.com", "Connection: close"),
    )


def test_an_ipv6_authority_keeps_its_brackets() -> None:
    request = parse_head(head("GET http://[::1]:8080/ HTTP/1.1"))
    assert request.host == "::1"
    assert b"\r\nHost: [::1]:8080\r\n" in request.head


@pytest.mark.parametrize(
    ("request_line", "message"),
    [
        ("GET https://example.com/ HTTP/1.1", "https goes through CONNECT"),
        ("GET /index.html HTTP/1.1", "absolute http:// URI"),
        ("GET http://example.com:99999/ HTTP/1.1", "invalid port"),
        ("GET http://exa$mple.com/ HTTP/1.1", "invalid host name"),
        ("GET http://example.com/ HTTP/2", "malformed request line"),
        ("GET http://example.com/  HTTP/1.1", "malformed request line"),
        ("GET", "malformed request line"),
    ],
)
def test_requests_the_proxy_cannot_serve_say_why(request_line: str, message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        parse_head(head(request_line))


@pytest.mark.parametrize("header", ["No colon here", " Folded: continuation", "Name : value"])
def test_malformed_header_lines_are_refused(header: str) -> None:
    with pytest.raises(BadRequest, match="malformed header line"):
        parse_head(head("GET http://example.com/ HTTP/1.1", header))


def test_is_address() -> None:
    assert is_address("10.0.0.1")
    assert is_address("::ffff:169.254.169.254")
    assert not is_address("example.com")
    assert not is_address("1.2.3.4.example.com")


async def test_read_head_returns_the_head_and_what_follows_it() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.setblocking(False)
        started: list[bool] = []
        theirs.sendall(b"CONNECT a.test:443 HTTP/1.1\r\n")
        reading = asyncio.ensure_future(read_head(ours, b"", lambda: started.append(True)))
        await asyncio.sleep(0.05)
        assert started == [True]  # the first byte is in, the head is not complete
        assert not reading.done()
        theirs.sendall(b"\r\n\x16\x03\x01early")
        got = await asyncio.wait_for(reading, 5)
    assert got == (b"CONNECT a.test:443 HTTP/1.1\r\n\r\n", b"\x16\x03\x01early")


async def test_read_head_refuses_an_endless_head_and_notices_a_closed_client() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.setblocking(False)
        with pytest.raises(BadRequest, match="too large"):
            await read_head(ours, b"GET http://a.test/ HTTP/1.1\r\nX: " + b"x" * MAX_HEAD, list)
        theirs.sendall(b"GET http://a.test/ HTTP/1.1\r\n")
        theirs.shutdown(socket.SHUT_WR)
        with pytest.raises(ClientClosed):
            await read_head(ours, b"", list)


async def test_answer_names_the_rule_that_denied() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.setblocking(False)
        await answer(ours, 403, "Forbidden", "denied: not in the allowlist", "allowlist")
        ours.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := theirs.recv(4096):
            received += chunk
    status, _, rest = received.partition(b"\r\n")
    headers, _, body = rest.partition(b"\r\n\r\n")
    assert status == b"HTTP/1.1 403 Forbidden"
    assert b"X-Jupyter-Sandbox-Denied: allowlist" in headers.split(b"\r\n")
    assert b"Content-Length: %d" % len(body) in headers.split(b"\r\n")
    assert body == b"denied: not in the allowlist\n"
