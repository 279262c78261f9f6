"""The HTTP/1.1 head grammar the host holds what a sandbox sends to, strictly (RFC 9110/9112).

Two parsers read heads a sandbox writes: the egress proxy a request's (network/request_head.py),
the port links' relay an answer's (port_answer.py). Where the host and the other end (a server
upstream, the user's browser) could read one head two ways, a header could be smuggled past
the host's checks, so both read only this grammar: lines end in CRLF, nothing else; a header
line is an ASCII token, a colon and a value without control characters; the count is bounded;
and the headers whose copies would be read differently come once. ValueError says what broke
it, for the caller's own error.
"""

from __future__ import annotations

import re
from collections.abc import Collection

# In bytes patterns, [0-9] and the like are ASCII only (\d in a str pattern is not).
TOKEN = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_HEADER_LINE = re.compile(rb"(" + TOKEN + rb"):[ \t]*([\t\x20-\x7e\x80-\xff]*?)[ \t]*")


def head_lines(head: bytes, max_headers: int) -> list[bytes]:
    """The lines of ``head`` (a start line, header lines, the empty line that ends it)."""
    if not head.endswith(b"\r\n\r\n"):
        raise ValueError("a head that does not end in an empty line (CRLF CRLF)")
    lines = head[:-4].split(b"\r\n")
    if any(b"\r" in line or b"\n" in line for line in lines):
        raise ValueError("a bare CR or LF (lines end in CRLF only)")
    if len(lines) - 1 > max_headers:
        raise ValueError(f"more than {max_headers} header lines")
    return lines


def header_fields(lines: list[bytes], once: Collection[bytes]) -> list[tuple[bytes, bytes]]:
    """Each header line's name and value (its surrounding spaces off); a second copy of a
    header named in ``once`` (lowercase), or Transfer-Encoding beside Content-Length, is
    refused too."""
    fields: list[tuple[bytes, bytes]] = []
    seen: set[bytes] = set()
    for line in lines:
        match = _HEADER_LINE.fullmatch(line)
        if match is None:
            raise ValueError("a malformed header line (one is Name: value)")
        name, value = match[1], match[2]
        lower = name.lower()
        if lower in once:
            if lower in seen:
                raise ValueError(f"{name.decode()} twice")
            seen.add(lower)
        fields.append((name, value))
    names = {name.lower() for name, _value in fields}
    if {b"transfer-encoding", b"content-length"} <= names:
        raise ValueError("both Transfer-Encoding and Content-Length (send one)")
    return fields


def split_head(
    head: bytes, start_line: re.Pattern[bytes], max_headers: int, once: Collection[bytes]
) -> tuple[re.Match[bytes] | None, list[tuple[bytes, bytes]]]:
    """``head`` read whole: its start line matched against ``start_line`` (None where it does
    not match, for the caller's own words) and its header fields (:func:`header_fields`)."""
    lines = head_lines(head, max_headers)
    return start_line.fullmatch(lines[0]), header_fields(lines[1:], once)
