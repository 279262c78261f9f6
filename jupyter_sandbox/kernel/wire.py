"""Jupyter messages as the relay sees them: raw frames, verified and re-signed with Session.

The relay never decodes a message's content or buffers to pass it on. It checks the signature
over the four JSON frames with the sending side's key, and signs the same frames with the
receiving side's key. Frames stay the zmq.Frame objects they were received as, so a large output
is neither copied into Python bytes nor copied again to be sent on; only the header is decoded,
and only when a hook asks for the message type.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Sequence
from typing import Any

import zmq
from jupyter_client.session import Session

DELIM = b"<IDS|MSG>"
Part = zmq.Frame | bytes  # as received (Frame) or made by the proxy (bytes)


class MalformedMessage(ValueError):
    """Frames that are not a Jupyter wire message."""


def as_bytes(part: Part) -> bytes:
    """The bytes of a frame (zmq.Frame caches them, so asking twice copies once)."""
    return part.bytes if isinstance(part, zmq.Frame) else bytes(part)


class WireMessage:
    """One message: routing identities, the four signed JSON frames, and raw buffers."""

    __slots__ = ("_header", "buffers", "content", "header", "idents", "metadata", "parent")

    def __init__(
        self,
        idents: list[Part],
        header: Part,
        parent: Part,
        metadata: Part,
        content: Part,
        buffers: list[Part] | None = None,
    ) -> None:
        self.idents = idents
        self.header = header
        self.parent = parent
        self.metadata = metadata
        self.content = content
        self.buffers: list[Part] = buffers if buffers is not None else []
        self._header: dict[str, Any] | None = None

    @property
    def header_dict(self) -> dict[str, Any]:
        if self._header is None:
            decoded = json.loads(as_bytes(self.header))
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
        parent = json.loads(raw) if raw else {}
        return str(parent.get("msg_id", "")) if isinstance(parent, dict) else ""

    def content_dict(self) -> dict[str, Any]:
        decoded = json.loads(as_bytes(self.content))
        return decoded if isinstance(decoded, dict) else {}

    def signed_parts(self) -> list[Part]:
        return [self.header, self.parent, self.metadata, self.content]

    def ident_bytes(self) -> list[bytes]:
        return [as_bytes(ident) for ident in self.idents]


def parse(frames: Sequence[Part]) -> tuple[WireMessage, bytes]:
    """Split received frames into a message and its signature (raises MalformedMessage)."""
    # Routing identities come first and are few; the delimiter is searched among them only.
    index = next((i for i, frame in enumerate(frames) if as_bytes(frame) == DELIM), None)
    if index is None:
        raise MalformedMessage("no <IDS|MSG> delimiter")
    if len(frames) - index - 1 < 5:
        raise MalformedMessage(f"{len(frames) - index - 1} frames after the delimiter, 5 needed")
    signature = as_bytes(frames[index + 1])
    header, parent, metadata, content = frames[index + 2 : index + 6]
    message = WireMessage(
        list(frames[:index]), header, parent, metadata, content, list(frames[index + 6 :])
    )
    return message, signature


class Signer:
    """Verifies and signs for one side of the relay, with that side's key (via Session)."""

    def __init__(self, key: bytes, signature_scheme: str = "hmac-sha256") -> None:
        self.session = Session(key=key, signature_scheme=signature_scheme)

    def verify(self, message: WireMessage, signature: bytes) -> bool:
        # Session.sign feeds the frames to a copy of one keyed hmac object: zmq.Frame is a
        # buffer, so nothing is copied to be hashed.
        return hmac.compare_digest(self.session.sign(message.signed_parts()), signature)

    def frames(self, message: WireMessage) -> list[Part]:
        parts = message.signed_parts()
        return [*message.idents, DELIM, self.session.sign(parts), *parts, *message.buffers]

    def new_message(
        self,
        msg_type: str,
        content: dict[str, Any],
        *,
        parent: WireMessage | None = None,
        idents: list[bytes] | None = None,
    ) -> list[bytes]:
        """Frames of a message the proxy itself sends (replies it answers for the sandbox)."""
        parent_header = parent.header_dict if parent is not None else {}
        msg = self.session.msg(msg_type, content, parent=parent_header)
        frames: list[bytes] = self.session.serialize(msg, ident=idents or [])
        return frames
