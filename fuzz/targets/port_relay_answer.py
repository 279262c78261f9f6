"""The port links' reading of a sandbox server's answer head and the head rebuilt from it for
the browser (sandbox/operations/port_answer.py, which server_extension/port_relay.py uses).

MalformedAnswer is the expected outcome for anything malformed (the relay answers 502). A head
that parses must give the browser only what the relay promises: no CR, LF or NUL in any name or
value, no header that acts on Jupyter's whole origin, and a Location only as a path under the
link, in printable ASCII, without a dot segment.
"""

from __future__ import annotations

import re

from jupyter_sandbox.sandbox.operations.port_answer import (
    MAX_HEADERS,
    MalformedAnswer,
    browser_headers,
    parse_answer_head,
)

MAX_LEN = 4096
PREFIX = "/sandbox-ports/0123456789ab/8000/c2VjcmV0LXRva2VuLW9mLXRoZS1saW5r"
BASE = PREFIX + "/app/page?x=1"
ORIGIN_WIDE = {"set-cookie", "set-cookie2", "clear-site-data", "strict-transport-security"}
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_DOTS = re.compile(r"(?:\.|%2e){1,2}", re.IGNORECASE)


def fuzz_one_input(data: bytes) -> None:
    try:
        head = parse_answer_head(data)
    except MalformedAnswer:
        return
    assert 100 <= head.code <= 599, head
    assert len(head.headers) <= MAX_HEADERS
    for name, value in browser_headers(head.headers, PREFIX, BASE, keep=("upgrade",)):
        assert not _CONTROL.search(name + value), (name, value)
        assert name.lower() not in ORIGIN_WIDE, name
        if name.lower() == "location":
            assert value.startswith(PREFIX + "/"), value
            assert all("\x21" <= c <= "\x7e" for c in value), value
            assert "\\" not in value, value
            path = value.split("?", 1)[0].split("#", 1)[0]
            assert not any(_DOTS.fullmatch(segment) for segment in path.split("/")), value
