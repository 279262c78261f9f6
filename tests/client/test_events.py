"""parse_events: Server-Sent Events as the server writes them, and as the standard allows a
proxy to reframe them."""

from __future__ import annotations

import pytest

from jupyter_sandbox.client.events import EventStreamError, ServerEvent, parse_events


def events(text: bytes) -> list[ServerEvent]:
    return list(parse_events(text.splitlines(keepends=True)))


def test_the_servers_events_one_data_line_each() -> None:
    stream = (
        b'event: stdout\ndata: {"text": "a\\nb"}\n\n'
        b'event: stderr\ndata: {"text": "\xc3\xa9"}\n\n'
        b'event: result\ndata: {"exit_code": 0}\n\n'
    )
    assert events(stream) == [
        ServerEvent("stdout", {"text": "a\nb"}),
        ServerEvent("stderr", {"text": "é"}),
        ServerEvent("result", {"exit_code": 0}),
    ]
    assert [e.final for e in events(stream)] == [False, False, True]


def test_what_the_standard_allows_besides() -> None:
    stream = (
        b": a comment, as a keep-alive\r\n"
        b"event:display\r\n"  # no space after the colon
        b'data: {"type": "display_data",\r\n'  # data split over lines, joined by newlines
        b'data:  "data": {}}\r\n'
        b"id: 7\r\n"
        b"\r\n"
        b"event: nothing\n\n"  # no data: not dispatched
        b'data: {"unnamed": true}\n\n'  # no name: "message"
        b'event: error\ndata: {"code": "x"}\n'  # cut short: no blank line, dropped
    )
    assert events(stream) == [
        ServerEvent("display", {"type": "display_data", "data": {}}),
        ServerEvent("message", {"unnamed": True}),
    ]


def test_data_that_is_not_a_json_object_is_refused() -> None:
    with pytest.raises(EventStreamError, match="not JSON"):
        events(b"event: stdout\ndata: {oops\n\n")
    with pytest.raises(EventStreamError, match="carries list, not an object"):
        events(b"event: stdout\ndata: [1]\n\n")
