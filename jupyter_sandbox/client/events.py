"""Server-Sent Events, as the server streams a command or a code run (``"stream": true``), or
a background command's output (``?follow=true``).

transport.py hands :func:`parse_events` the lines of a ``text/event-stream`` answer as they
arrive; execution.py and commands.py consume the events. The server sends each event as
``event: NAME`` and one ``data: JSON`` line, then a blank line (openapi.yaml's x-events:
stdout, stderr, display, clear, output, then result or error); the parser follows the WHATWG
rules for the rest (several data lines joined by newlines, comments, CR LF), so a proxy that
reframes the stream does not confuse it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

# Events that end a stream: nothing comes after them.
FINAL_EVENTS = ("result", "error")


@dataclass(frozen=True)
class ServerEvent:
    """One event: its name (``message`` when the server named none) and its decoded data."""

    name: str
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def final(self) -> bool:
        """The last event of a run or command: its result, or the error that ended it."""
        return self.name in FINAL_EVENTS


class EventStreamError(ValueError):
    """An event's data is not the JSON object the API sends (transport.py reports it with the
    request it came from)."""


def parse_events(lines: Iterable[bytes]) -> Iterator[ServerEvent]:
    """The events of a stream, each yielded as soon as the blank line ending it arrives.

    ``lines`` are raw lines, their line ending included or not (an HTTP response iterated line
    by line). An event left unfinished when the lines end is dropped, as the standard says: a
    stream cut short is noticed by the caller, who never sees its final event."""
    name = ""
    data: list[str] = []
    for raw in lines:
        # UTF-8 never encodes a character with a newline byte, so a whole line decodes alone.
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if not line:  # the blank line ends an event
            if data:
                yield ServerEvent(name or "message", _decoded(name, "\n".join(data)))
            name, data = "", []
            continue
        if line.startswith(":"):  # a comment (a keep-alive of some proxies)
            continue
        key, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if key == "event":
            name = value
        elif key == "data":
            data.append(value)
        # "id" and "retry" are for reconnecting, which a run's stream cannot do; others are
        # ignored, as the standard says.


def _decoded(name: str, text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError:
        raise EventStreamError(
            f"event {name!r} carries data that is not JSON: {text[:200]!r}"
        ) from None
    if not isinstance(data, dict):
        raise EventStreamError(f"event {name!r} carries {type(data).__name__}, not an object")
    return data
