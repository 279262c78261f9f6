"""The proxy's reading of a request head: what it forwards, and what it refuses (no engine)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from jupyter_sandbox.protocol.errors import SandboxError
from jupyter_sandbox.sandbox.network.request_head import (
    MAX_HEAD,
    BadRequest,
    ClientClosed,
    ProxyRequest,
    answer,
    is_address,
    parse_head,
    read_head,
    with_headers,
)


def head(*lines: str) -> bytes:
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def test_connect_names_host_and_port() -> None:
    request = parse_head(head("CONNECT PyPI.org.:443 HTTP/1.1", "Host: pypi.org:443"))
    assert request == ProxyRequest("CONNECT", "pypi.org", 443, b"")


def test_a_malformed_head_is_an_error_of_the_project_root() -> None:
    # Callers catch SandboxError for every error of the core; the proxy's 400 is one of them.
    with pytest.raises(SandboxError) as caught:
        parse_head(head("GET /path HTTP/1.1", "Host: pypi.org"))
    assert isinstance(caught.value, BadRequest)
    assert caught.value.to_dict() == {
        "code": "bad_proxy_request",
        "message": "send an absolute http:// URI to the proxy, not a path",
    }


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


# Issue 31: what a lenient reading let through. The proxy and the server must read one head
# the same way, so anything but the strict grammar is refused.
@pytest.mark.parametrize(
    ("raw", "message"),
    [
        # A bare LF in the request line: the server read the line after it as a header, a Host
        # before the proxy's own.
        (b"GET http://a.test/ HTTP/1.1\nHost:evil.test\r\n\r\n", "bare CR or LF"),
        (b"GET http://a.test/ HTTP/1.1\r\nAccept: */*\nHost: evil.test\r\n\r\n", "bare CR or LF"),
        (b"GET http://a.test/ HTTP/1.1\r\nX: a\rHost: evil.test\r\n\r\n", "bare CR or LF"),
        # A port in other digits than ASCII: latin-1's ² (0xb2) made int() raise (no answer
        # at all); as UTF-8, other scripts' digits are no ASCII either.
        (b"CONNECT a.test:\xb2 HTTP/1.1\r\n\r\n", "printable ASCII"),
        (b"CONNECT a.test:4\xb3 HTTP/1.1\r\n\r\n", "printable ASCII"),
        ("CONNECT a.test:٤٤٣ HTTP/1.1\r\n\r\n".encode(), "printable ASCII"),
        ("GET http://a.test:٨٠/ HTTP/1.1\r\n\r\n".encode(), "printable ASCII"),
        (b"CONNECT [::1%eth0]:443 HTTP/1.1\r\n\r\n", "CONNECT needs host:port"),
        (b"CONNECT ::1:443 HTTP/1.1\r\n\r\n", "CONNECT needs host:port"),
        (b"GET http://user:pw@a.test/ HTTP/1.1\r\n\r\n", "invalid host or port"),
        (b"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nhost: b.test\r\n\r\n", "twice"),
        (
            b"POST http://a.test/ HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 30\r\n\r\n",
            "twice",
        ),
        (
            b"POST http://a.test/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            "both Transfer-Encoding and Content-Length",
        ),
        (b"GET http://a.test/ HTTP/1.1\r\nX: a\x00b\r\n\r\n", "malformed header line"),
        (b"G\xc9T http://a.test/ HTTP/1.1\r\n\r\n", "malformed request line"),
        (b"GET http://a.test/\xff HTTP/1.1\r\n\r\n", "printable ASCII"),
        (b"GET http://a.test/ HTTP/1.1\r\n" + b"X: y\r\n" * 101 + b"\r\n", "header lines"),
        (b"GET http://a.test/ HTTP/1.1\r\n", "empty line"),
    ],
)
def test_heads_outside_the_grammar_are_refused(raw: bytes, message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        parse_head(raw)


async def test_read_head_refuses_a_complete_head_past_the_limit() -> None:
    """One read brings up to 256 KiB: a head that ends in it but past MAX_HEAD is refused."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.setblocking(False)
        big = b"GET http://a.test/ HTTP/1.1\r\nX: " + b"x" * MAX_HEAD + b"\r\n\r\n"
        with pytest.raises(BadRequest, match="too large"):
            await read_head(ours, big, list)


def test_credentials_replace_the_sandboxs_headers_of_that_name_never_duplicate() -> None:
    request = parse_head(
        head(
            "GET http://api.example.com/v1 HTTP/1.1",
            "authorization: Bearer sandbox-chose-this",
            "Accept: */*",
            "AUTHORIZATION: Bearer and-this",
        )
    )
    out = with_headers(request.head, [("Authorization", "Bearer from-the-owner")])
    assert out == head(
        "GET /v1 HTTP/1.1",
        "Host: api.example.com",
        "Accept: */*",
        "Authorization: Bearer from-the-owner",
        "Connection: close",
    )
    assert with_headers(request.head, []) == request.head


@pytest.mark.parametrize(
    "added",
    [
        [("X-Key", "a\r\nHost: evil.test")],
        [("X-Key", "caf\u00e9")],
        [("Bad Name", "v")],
        [("Host", "evil.test")],
        [("Content-Length", "0")],
    ],
)
def test_a_credential_that_could_reframe_the_request_is_refused(
    added: list[tuple[str, str]],
) -> None:
    request = parse_head(head("GET http://api.example.com/ HTTP/1.1"))
    with pytest.raises(ValueError, match="not a valid header"):
        with_headers(request.head, added)
