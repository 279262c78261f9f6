"""The Connect protocol (connectrpc.com/docs/protocol) as envd speaks it to E2B's SDK: JSON
messages over HTTP/1.1, unary or server-streaming.

* unary: ``Content-Type: application/json``, the request message is the body; the answer is
  the response message, or an error ``{"code", "message"}`` with the status its code has;
* server stream: ``Content-Type: application/connect+json``; the request body is one envelope
  (a flags byte, a 4-byte big-endian length, the JSON message), the answer is a 200 of such
  envelopes, the last with flag END_STREAM and ``{}`` or ``{"error": {...}}``.

What a client sends is parsed strictly and bounded before it is read: the body's size, one
envelope with no flags (no compression), a JSON object whose fields are the message's own
(:class:`Message` reads each by its JSON or proto name, with its type checked). Nothing here
touches a sandbox: the services (process_service.py, filesystem_service.py) use it.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from typing import Any

from jupyter_sandbox.e2b_api.errors import E2BUnsupportedError
from jupyter_sandbox.protocol.errors import InvalidRequestError
from jupyter_sandbox.protocol.requests import json_object

UNARY_TYPE = "application/json"
STREAM_TYPE = "application/connect+json"
MAX_MESSAGE = 1024**2  # bytes of one request message (paths, commands: never near this)
HEADER = struct.Struct(">BI")  # an envelope's flags and length
END_STREAM = 0x02
COMPRESSED = 0x01


def content_kind(content_type: str | None) -> str:
    """ "unary" or "stream" for a request's Content-Type; InvalidRequestError for another
    (envd's binary protobuf included: E2B's SDK speaks JSON)."""
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    if kind == UNARY_TYPE:
        return "unary"
    if kind == STREAM_TYPE:
        return "stream"
    raise InvalidRequestError(
        f"Content-Type {kind or 'none'!r} is not a Connect JSON request: send "
        f"{UNARY_TYPE} (unary calls) or {STREAM_TYPE} (streams), as E2B's SDK does"
    )


def request_message(body: bytes, kind: str) -> dict[str, Any]:
    """The one request message in ``body`` (a unary body, or a stream's single envelope)."""
    if len(body) > MAX_MESSAGE + HEADER.size:
        raise InvalidRequestError(f"the request message exceeds {MAX_MESSAGE} bytes")
    if kind == "stream":
        if len(body) < HEADER.size:
            raise InvalidRequestError("the request stream holds no complete envelope")
        flags, length = HEADER.unpack_from(body)
        if flags != 0:
            raise InvalidRequestError(
                f"envelope flags {flags:#x} are not supported: send one uncompressed message"
            )
        if length != len(body) - HEADER.size:
            raise InvalidRequestError(
                "the request stream must hold exactly one envelope whose length matches it"
            )
        body = body[HEADER.size :]
    return json_object(body, allow_empty=True, what="the request message")


def envelope(message: dict[str, Any], *, end: bool = False) -> bytes:
    """One envelope of a server stream: a message, or (``end``) the end-of-stream JSON."""
    data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()
    return HEADER.pack(END_STREAM if end else 0, len(data)) + data


def end_of_stream(error: dict[str, Any] | None = None) -> bytes:
    return envelope({} if error is None else {"error": error}, end=True)


class Message:
    """A request message's fields, each read once by name and type; :meth:`done` refuses the
    fields nobody read (a client's mistake, or an option this server does not honour)."""

    def __init__(self, data: dict[str, Any], what: str) -> None:
        self._data = data
        self._what = what
        self._read: set[str] = set()

    def raw(self, name: str) -> Any:
        """The field as it was sent (an enum: its name or number), marked read."""
        return self._get(name)

    def _get(self, name: str) -> Any:
        camel = _camel(name)
        for key in (camel, name):
            self._read.add(key)
        if camel in self._data and name in self._data and camel != name:
            raise InvalidRequestError(f"{self._what}: {name} is given twice")
        return self._data.get(camel, self._data.get(name))

    def string(self, name: str, *, default: str = "", limit: int = 64 * 1024) -> str:
        value = self._get(name)
        if value is None:
            return default
        if not isinstance(value, str) or len(value) > limit:
            raise InvalidRequestError(
                f"{self._what}: {name} must be a string of at most {limit} characters"
            )
        return value

    def optional_string(self, name: str, *, limit: int = 64 * 1024) -> str | None:
        return None if self._get(name) is None else self.string(name, limit=limit)

    def integer(self, name: str, *, default: int = 0, low: int = 0, high: int = 2**31) -> int:
        value = self._get(name)
        if value is None:
            return default
        if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 20:
            value = int(value)  # proto JSON may write integers as strings
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise InvalidRequestError(
                f"{self._what}: {name} must be an integer from {low} to {high}"
            )
        return value

    def flag(self, name: str) -> bool:
        value = self._get(name)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise InvalidRequestError(f"{self._what}: {name} must be true or false")
        return value

    def strings(self, name: str, *, most: int = 4096, limit: int = 1024**2) -> list[str]:
        value = self._get(name)
        if value is None:
            return []
        if (
            not isinstance(value, list)
            or len(value) > most
            or not all(isinstance(v, str) and len(v) <= limit for v in value)
        ):
            raise InvalidRequestError(
                f"{self._what}: {name} must be a list of at most {most} strings"
            )
        return value

    def mapping(self, name: str, *, most: int = 256) -> dict[str, str]:
        value = self._get(name)
        if value is None:
            return {}
        if (
            not isinstance(value, dict)
            or len(value) > most
            or not all(isinstance(v, str) for v in value.values())
        ):
            raise InvalidRequestError(
                f"{self._what}: {name} must be an object of at most {most} string values"
            )
        return dict(value)

    def message(self, name: str) -> Message | None:
        value = self._get(name)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise InvalidRequestError(f"{self._what}: {name} must be an object")
        return Message(value, f"{self._what}.{name}")

    def done(self, unsupported: Iterable[str] = ()) -> None:
        """Refuse the fields not read: ``unsupported`` ones as not honoured, others unknown."""
        left = sorted(set(self._data) - self._read)
        if not left:
            return
        honoured = [name for name in left if name in set(unsupported)]
        if honoured:
            raise E2BUnsupportedError(
                f"{self._what}: {', '.join(honoured)} is not supported by jupyter-sandbox's "
                "E2B API (docs/how-to/e2b.md lists what is)"
            )
        raise InvalidRequestError(f"{self._what}: unknown field(s) {', '.join(left)}")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)
