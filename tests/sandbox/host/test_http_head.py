"""The head grammar both host parsers of a sandbox's HTTP hold it to (no engine)."""

from __future__ import annotations

import re

import pytest

from jupyter_sandbox.sandbox.host.http_head import head_lines, header_fields, split_head


def test_a_head_is_its_lines_and_its_fields() -> None:
    lines = head_lines(b"HTTP/1.1 200 OK\r\nA:  b \r\nC-D:\te\r\n\r\n", 10)
    assert lines == [b"HTTP/1.1 200 OK", b"A:  b ", b"C-D:\te"]
    assert header_fields(lines[1:], {b"a"}) == [(b"A", b"b"), (b"C-D", b"e")]


def test_split_head_matches_the_start_line_and_reads_the_fields() -> None:
    status = re.compile(rb"HTTP/1\.1 ([0-9]{3}) .*")
    start, fields = split_head(b"HTTP/1.1 200 OK\r\nA: b\r\n\r\n", status, 10, ())
    assert start is not None
    assert start[1] == b"200"
    assert fields == [(b"A", b"b")]
    # A start line off the grammar is None, for the caller's own error; the fields still hold.
    start, fields = split_head(b"HTTP/1.0 200 OK\r\nA: b\r\n\r\n", status, 10, ())
    assert start is None
    assert fields == [(b"A", b"b")]
    with pytest.raises(ValueError, match="twice"):
        split_head(b"HTTP/1.1 200 OK\r\nA: b\r\na: c\r\n\r\n", status, 10, {b"a"})


@pytest.mark.parametrize(
    ("head", "message"),
    [
        (b"X\r\nA: b\r\n", "does not end in an empty line"),
        (b"X\nA: b\r\n\r\n", "bare CR or LF"),
        (b"X\r\nA: b\rC: d\r\n\r\n", "bare CR or LF"),
        (b"X\r\n" + b"A: b\r\n" * 3 + b"\r\n", "more than 2 header lines"),
    ],
)
def test_lines_end_in_crlf_and_are_counted(head: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        head_lines(head, 2)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b" A: folded", "malformed header line"),
        (b"A : b", "malformed header line"),
        (b"A\xb2: b", "malformed header line"),
        (b"A: b\x00", "malformed header line"),
        (b"A: b\x7f", "malformed header line"),
    ],
)
def test_a_header_line_is_a_token_a_colon_and_a_value(line: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        header_fields([line], ())


def test_headers_that_must_come_once_do() -> None:
    with pytest.raises(ValueError, match="host twice"):
        header_fields([b"Host: a", b"host: b"], {b"host"})
    assert header_fields([b"Accept: a", b"Accept: b"], {b"host"}) == [
        (b"Accept", b"a"),
        (b"Accept", b"b"),
    ]
    with pytest.raises(ValueError, match="both Transfer-Encoding and Content-Length"):
        header_fields([b"Transfer-Encoding: chunked", b"Content-Length: 1"], ())
