"""The relay's reading of wire frames a sandbox's kernel sends (no engine, no kernel)."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from jupyter_sandbox.kernel.wire import (
    CONTENT_BYTES,
    DELIM,
    HEADER_BYTES,
    IDENT_BYTES,
    MAX_IDENTS,
    MalformedMessage,
    Signer,
    WireMessage,
    parse,
)

NESTED = b"[" * 60_000  # JSON nested past the interpreter's stack


def test_a_signed_message_is_read() -> None:
    signer = Signer(b"key")
    frames = signer.new_message("stream", {"name": "stdout", "text": "hi"}, idents=[b"id"])
    message = parse(list(frames))
    assert signer.verify(message)
    assert (message.msg_type, message.content_dict()["text"]) == ("stream", "hi")
    assert message.ident_bytes() == [b"id"]


@pytest.mark.parametrize(
    ("frame", "read"),
    [
        (2, lambda message: message.msg_type),
        (3, lambda message: message.parent_msg_id()),
        (5, lambda message: message.content_dict()),
    ],
)
def test_a_frame_nested_past_the_stack_is_malformed(
    frame: int, read: Callable[[WireMessage], object]
) -> None:
    """json raised RecursionError, which the relay's drop of malformed messages (it catches
    MalformedMessage and ValueError) let through to the reactor."""
    frames = [DELIM, b"", b"{}", b"{}", b"{}", b"{}"]
    frames[frame] = NESTED
    message = parse(list(frames))
    with pytest.raises(MalformedMessage, match="nested too deeply"):
        read(message)


@pytest.mark.checklist(
    row=74,
    attack="the sandbox's kernel sends a header past 64 KiB, a parent header with NaN or a "
    "repeated key, a content frame past 1 MiB where the relay decodes content",
    expected="MalformedMessage (the relay drops the message); no frame is decoded past its cap",
)
@pytest.mark.parametrize(
    ("frame", "raw", "why"),
    [
        (2, b'{"msg_type": "' + b"x" * HEADER_BYTES + b'"}', "allowed"),
        (3, b'{"msg_id": NaN}', "not a JSON number"),
        (3, b'{"msg_id": "a", "msg_id": "b"}', "twice"),
        (5, b'{"restart": "' + b"x" * CONTENT_BYTES + b'"}', "allowed"),
    ],
)
def test_a_frame_past_its_size_or_not_strict_json_is_malformed(
    frame: int, raw: bytes, why: str
) -> None:
    """Plain json.loads decoded any size the sandbox sent, and took NaN and repeated keys."""
    frames = [DELIM, b"", b"{}", b"{}", b"{}", b"{}"]
    frames[frame] = raw
    message = parse(list(frames))
    read = {2: lambda: message.msg_type, 3: message.parent_msg_id, 5: message.content_dict}
    with pytest.raises(MalformedMessage, match=why):
        read[frame]()


def test_routing_identities_are_few_and_small() -> None:
    signer = Signer(b"key")
    frames = signer.new_message("stream", {"name": "stdout", "text": "hi"})
    assert parse([b"i"] * MAX_IDENTS + frames).delim == MAX_IDENTS
    with pytest.raises(
        MalformedMessage, match=re.escape("no <IDS|MSG> delimiter among the first 17")
    ):
        parse([b"i"] * (MAX_IDENTS + 1) + frames)
    assert parse([b"i" * IDENT_BYTES, *frames]).ident_bytes() == [b"i" * IDENT_BYTES]
    with pytest.raises(MalformedMessage, match="a routing identity of 1025 bytes"):
        parse([b"i" * (IDENT_BYTES + 1), *frames])
    with pytest.raises(MalformedMessage, match=re.escape("no <IDS|MSG> delimiter")):
        parse([b"i", DELIM + b"x", b"sig"])
