"""Jupyter messages as the relay sees them: raw frames, verified and re-signed with Session.

The relay never decodes a message's content or buffers to pass it on. It checks the signature
over the four JSON frames with the sending side's key, and signs the same frames with the
receiving side's key. Frames stay the zmq.Frame objects they were received as, so a large output
is neither copied into Python bytes nor copied again to be sent on; only the header is decoded,
and only when a hook asks for the message type.
"""

from __future__ import annotations

import hmac
from typing import Any

import zmq
from jupyter_client.session import Session

from jupyter_sandbox.protocol import strict_json

DELIM = b"<IDS|MSG>"
# The most a header or parent header frame may hold to be decoded (ipykernel's are under 1 KiB);
# the sandbox writes them, and a frame is decoded whole.
HEADER_BYTES = 64 * 1024
# The routing identities before the delimiter: ZMQ's own are at most 255 bytes and a frontend's
# request carries one; the sandbox writes them on its messages (iopub topics, a reply's route),
# and they reach frontends uncounted by any cap, so a message with more, or a larger one, is
# malformed.
MAX_IDENTS = 16
IDENT_BYTES = 1024
# The most a content frame may hold to be decoded here (the relay decodes only small replies'
# content: kernel_info, shutdown); anything larger is passed on, never parsed.
CONTENT_BYTES = 1024 * 1024
Part = zmq.Frame | bytes  # as received (Frame) or made by the proxy (bytes)


class MalformedMessage(ValueError):
    """Frames that are not a Jupyter wire message."""


def as_bytes(part: Part) -> bytes:
    """The bytes of a frame (zmq.Frame caches them, so asking twice copies once)."""
    return part.bytes if isinstance(part, zmq.Frame) else bytes(part)


class WireMessage:
    """One message as received: its frames, and where the delimiter is among them.

    Frames: routing identities, the delimiter, the signature, the four signed JSON frames
    (header, parent header, metadata, content), then raw buffers. A message is relayed as the
    frames it came in, with only the signature replaced; nothing is copied or decoded unless a
    hook asks for it.
    """

    __slots__ = ("_header", "delim", "frames")

    def __init__(self, frames: list[Part], delim: int) -> None:
        self.frames = frames
        self.delim = delim
        self._header: dict[str, Any] | None = None

    @property
    def idents(self) -> list[Part]:
        return self.frames[: self.delim]

    @property
    def signature(self) -> Part:
        return self.frames[self.delim + 1]

    @property
    def header(self) -> Part:
        return self.frames[self.delim + 2]

    @property
    def parent(self) -> Part:
        return self.frames[self.delim + 3]

    @property
    def content(self) -> Part:
        return self.frames[self.delim + 5]

    @content.setter
    def content(self, content: bytes) -> None:
        self.frames[self.delim + 5] = content

    def signed_parts(self) -> list[Part]:
        return self.frames[self.delim + 2 : self.delim + 6]

    @property
    def header_dict(self) -> dict[str, Any]:
        if self._header is None:
            decoded = loads(as_bytes(self.header), HEADER_BYTES)
            if not isinstance(decoded, dict):
                raise MalformedMessage("header is not a JSON object")
            self._header = decoded
        return self._header

    def header_mentions(self, name: bytes) -> bool:
        """Whether ``name`` occurs in the raw header: False rules a message type out without
        decoding (barring JSON escapes, which only a hostile sender would use)."""
        return name in as_bytes(self.header)

    @property
    def msg_type(self) -> str:
        return str(self.header_dict.get("msg_type", ""))

    @property
    def msg_id(self) -> str:
        return str(self.header_dict.get("msg_id", ""))

    def parent_msg_id(self) -> str:
        raw = as_bytes(self.parent)
        parent = loads(raw, HEADER_BYTES) if raw else {}
        return str(parent.get("msg_id", "")) if isinstance(parent, dict) else ""

    def content_dict(self) -> dict[str, Any]:
        decoded = loads(as_bytes(self.content), CONTENT_BYTES)
        return decoded if isinstance(decoded, dict) else {}

    def ident_bytes(self) -> list[bytes]:
        return [as_bytes(ident) for ident in self.idents]


def loads(raw: bytes, max_bytes: int) -> Any:
    """A JSON frame decoded by the strict reader of sandbox JSON (at most ``max_bytes``, nesting
    within the stack, finite numbers, no repeated keys); MalformedMessage for anything else,
    which the relay's callers drop (a RecursionError or a gigabyte's decoding they would not)."""
    try:
        return strict_json.loads(raw, max_bytes=max_bytes)
    except strict_json.MalformedJSONError as exc:
        raise MalformedMessage(f"a JSON frame that is not read: {exc.message}") from None


def parse(frames: list[Part]) -> WireMessage:
    """The message in received frames (raises MalformedMessage)."""
    # The delimiter follows the routing identities, which are few and small: a frame is only
    # copied to be compared once its length says it may be one of them.
    delim = -1
    for i, frame in enumerate(frames[: MAX_IDENTS + 1]):
        if len(frame) == len(DELIM) and as_bytes(frame) == DELIM:
            delim = i
            break
        if len(frame) > IDENT_BYTES:
            raise MalformedMessage(f"a routing identity of {len(frame)} bytes")
    if delim < 0:
        raise MalformedMessage(f"no <IDS|MSG> delimiter among the first {MAX_IDENTS + 1} frames")
    if len(frames) - delim - 1 < 5:
        raise MalformedMessage(f"{len(frames) - delim - 1} frames after the delimiter, 5 needed")
    return WireMessage(frames, delim)


class Signer:
    """Verifies and signs for one side of the relay, with that side's key (via Session)."""

    def __init__(self, key: bytes, signature_scheme: str = "hmac-sha256") -> None:
        self.session = Session(key=key, signature_scheme=signature_scheme)

    def verify(self, message: WireMessage) -> bool:
        # Session.sign feeds the frames to a copy of one keyed hmac object: zmq.Frame is a
        # buffer, so nothing is copied to be hashed.
        signature = as_bytes(message.signature)
        return hmac.compare_digest(self.session.sign(message.signed_parts()), signature)

    def frames(self, message: WireMessage) -> list[Part]:
        """The message's frames, signed with this side's key."""
        frames = list(message.frames)
        frames[message.delim + 1] = self.session.sign(message.signed_parts())
        return frames

    def new_message(
        self,
        msg_type: str,
        content: dict[str, Any],
        *,
        parent: WireMessage | None = None,
        idents: list[bytes] | None = None,
        parent_header: dict[str, Any] | None = None,
    ) -> list[bytes]:
        """Frames of a message the proxy itself sends (replies it answers for the sandbox); its
        parent is ``parent``'s header, or ``parent_header`` as given."""
        if parent_header is None:
            parent_header = parent.header_dict if parent is not None else {}
        msg = self.session.msg(msg_type, content, parent=parent_header)
        frames: list[bytes] = self.session.serialize(msg, ident=idents or [])
        return frames
