"""Jupyter messages as the relay sees them: raw frames, verified and re-signed with Session.

The relay never decodes a message's content or buffers to pass it on. It checks the signature
over the four JSON frames with the sending side's key, and signs the same frames with the
receiving side's key. Headers are decoded only when the proxy needs the message type.
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass, field
from typing import Any

import zmq
from jupyter_client.session import Session

DELIM = b"<IDS|MSG>"


class MalformedMessage(ValueError):
    """Frames that are not a Jupyter wire message."""


@dataclass
class WireMessage:
    """One message: routing identities, the four signed JSON frames, and raw buffers."""

    idents: list[bytes]
    header: bytes
    parent: bytes
    metadata: bytes
    content: bytes
    buffers: list[Any] = field(default_factory=list)  # zmq.Frame or bytes, never decoded
    _header: dict[str, Any] | None = None

    @property
    def header_dict(self) -> dict[str, Any]:
        if self._header is None:
            decoded = json.loads(self.header)
            if not isinstance(decoded, dict):
                raise MalformedMessage("header is not a JSON object")
            self._header = decoded
        return self._header

    @property
    def msg_type(self) -> str:
        return str(self.header_dict.get("msg_type", ""))

    @property
    def msg_id(self) -> str:
        return str(self.header_dict.get("msg_id", ""))

    def parent_msg_id(self) -> str:
        parent = json.loads(self.parent) if self.parent else {}
        return str(parent.get("msg_id", "")) if isinstance(parent, dict) else ""

    def content_dict(self) -> dict[str, Any]:
        decoded = json.loads(self.content)
        return decoded if isinstance(decoded, dict) else {}

    def signed_parts(self) -> list[bytes]:
        return [self.header, self.parent, self.metadata, self.content]


def _bytes(frame: Any) -> bytes:
    return frame.bytes if isinstance(frame, zmq.Frame) else bytes(frame)


def parse(frames: list[Any]) -> tuple[WireMessage, bytes]:
    """Split received frames into a message and its signature (raises MalformedMessage)."""
    index = next((i for i, frame in enumerate(frames) if _bytes(frame) == DELIM), None)
    if index is None:
        raise MalformedMessage("no <IDS|MSG> delimiter")
    rest = frames[index + 1 :]
    if len(rest) < 5:
        raise MalformedMessage(f"{len(rest)} frames after the delimiter, at least 5 needed")
    idents = [_bytes(f) for f in frames[:index]]
    signature, header, parent, metadata, content = (_bytes(f) for f in rest[:5])
    return WireMessage(idents, header, parent, metadata, content, list(rest[5:])), signature


class Signer:
    """Verifies and signs for one side of the relay, with that side's key (via Session)."""

    def __init__(self, key: bytes, signature_scheme: str = "hmac-sha256") -> None:
        self.session = Session(key=key, signature_scheme=signature_scheme)

    def verify(self, message: WireMessage, signature: bytes) -> bool:
        return hmac.compare_digest(self.session.sign(message.signed_parts()), signature)

    def frames(self, message: WireMessage) -> list[Any]:
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
