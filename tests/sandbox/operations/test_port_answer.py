"""The port links' reading of a sandbox server's answer head and what of it reaches the browser
(no engine: the real relay over a real sandbox is tests/security/rest/test_port_answers.py)."""

from __future__ import annotations

import pytest

from jupyter_sandbox.sandbox.operations.port_answer import (
    MAX_HEAD,
    MAX_HEADERS,
    AnswerHead,
    MalformedAnswer,
    browser_headers,
    parse_answer_head,
    under_prefix,
)

PREFIX = "/sandbox-ports/0123456789ab/8000/token"
BASE = PREFIX + "/app/page?x=1"


def test_a_head_is_read_into_its_parts() -> None:
    head = parse_answer_head(
        b"HTTP/1.1 404 Whatever the server says\r\nContent-Type: text/plain\r\n"
        b"X-Mine:  kept \r\nSet-Cookie: a=b\r\n\r\n"
    )
    assert head == AnswerHead(
        404, [("Content-Type", "text/plain"), ("X-Mine", "kept"), ("Set-Cookie", "a=b")]
    )
    assert head.reason == "Not Found"  # the standard one, not the sandbox's
    assert parse_answer_head(b"HTTP/1.0 599\r\n\r\n").reason == "Unknown"


@pytest.mark.parametrize(
    ("head", "message"),
    [
        # Issue 31: a bare LF in a 101's status line, and the Set-Cookie after it.
        (b"HTTP/1.1 101 Switching\nSet-Cookie: _xsrf=x\r\nUpgrade: websocket\r\n\r\n", "bare"),
        (b"HTTP/1.1 200 OK\r\nA: b\nSet-Cookie: _xsrf=x\r\n\r\n", "bare CR or LF"),
        (b"HTTP/1.1 200 OK\r\nA: b\rSet-Cookie: _xsrf=x\r\n\r\n", "bare CR or LF"),
        (b"HTTP/1.1 200 OK\n\n", "CRLF CRLF"),
        ("HTTP/1.1 ２００ OK\r\n\r\n".encode(), "status line"),  # noqa: RUF001 (fullwidth digits)
        (b"HTTP/1.1 2000 OK\r\n\r\n", "status line"),
        (b"HTTP/2 200 OK\r\n\r\n", "status line"),
        (b"HTTP/1.1 200 OK\r\n Folded: x\r\n\r\n", "header line"),
        (b"HTTP/1.1 200 OK\r\nName : x\r\n\r\n", "header line"),
        (b"HTTP/1.1 200 OK\r\nA: \x00\r\n\r\n", "header line"),
        (b"HTTP/1.1 302 Found\r\nLocation: /a\r\nlocation: /b\r\n\r\n", "twice"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", "twice"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n", "both"),
        (b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * (MAX_HEADERS + 1) + b"\r\n", "header lines"),
        (b"HTTP/1.1 200 OK\r\nX: " + b"y" * MAX_HEAD + b"\r\n\r\n", "bytes"),
    ],
)
def test_heads_outside_the_grammar_are_refused(head: bytes, message: str) -> None:
    with pytest.raises(MalformedAnswer, match=message):
        parse_answer_head(head)


def test_the_browser_gets_only_allowed_headers() -> None:
    sent = [
        ("Content-Type", "text/html"),
        ("Set-Cookie", "_xsrf=planted"),
        ("Clear-Site-Data", '"cookies"'),
        ("Strict-Transport-Security", "max-age=1"),
        ("WWW-Authenticate", 'Basic realm="Jupyter"'),
        ("Service-Worker-Allowed", "/"),
        ("X-Content-Type-Options", "sniff"),  # the relay's own, set by the relay
        ("Upgrade", "h2c"),
        ("X-Mine", "kept"),
        ("Cache-Control", "no-store"),
    ]
    assert browser_headers(sent, PREFIX, BASE) == [
        ("Content-Type", "text/html"),
        ("X-Mine", "kept"),
        ("Cache-Control", "no-store"),
    ]


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        ("/landing?x=1", PREFIX + "/landing?x=1"),
        ("http://localhost:8000/next", PREFIX + "/next"),
        ("http://127.0.0.1", PREFIX + "/"),
        ("landing", PREFIX + "/app/landing"),
        ("../up#frag", PREFIX + "/up#frag"),
        ("?y=2", PREFIX + "/app/page?y=2"),
        # Issue 31: a scheme-relative URL was passed on (an open redirect on Jupyter's origin).
        ("//evil.example/x", None),
        ("/\\evil.example/x", None),  # a browser reads \ as /
        ("https://evil.example/", None),
        ("http://localhost@evil.example/", None),
        ("javascript:alert(1)", None),
        ("/../../api/contents", None),
        ("/%2e%2E/api", None),
        ("../../../../api/contents", None),
        ("/a b", None),
        ("/caf\xe9", None),
        ("", None),
        ("http://]o", None),  # urlsplit raised ValueError (found by fuzz: port_relay_answer)
    ],
)
def test_a_location_stays_under_the_link(location: str, expected: str | None) -> None:
    assert under_prefix(location, PREFIX, BASE) == expected


def test_a_location_leading_elsewhere_is_left_out() -> None:
    sent = [("Location", "//evil.example/"), ("Content-Length", "0")]
    assert browser_headers(sent, PREFIX, BASE) == [("Content-Length", "0")]
