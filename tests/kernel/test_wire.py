"""The relay's reading of wire frames a sandbox's kernel sends (no engine, no kernel)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from jupyter_sandbox.kernel.wire import DELIM, MalformedMessage, Signer, WireMessage, parse

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
