"""The kernel relay's reading of the Jupyter wire frames a sandbox's kernel sends (kernel/wire.py).

The input is the frames of one message joined by FRAME_SEPARATOR. What the relay reads of a
message (the delimiter, the signature, the header's type and id, the parent's id, the content)
either comes out or fails with MalformedMessage/ValueError, which the relay answers by dropping
the message; any other exception would reach the reactor's catch-all instead.
"""

from __future__ import annotations

from jupyter_sandbox.kernel.wire import MalformedMessage, Part, Signer, parse

FRAME_SEPARATOR = b"\n--frame--\n"
KEY = b"fuzz-key"
_signer = Signer(KEY)


def fuzz_one_input(data: bytes) -> None:
    frames: list[Part] = list(data.split(FRAME_SEPARATOR))
    try:
        message = parse(frames)
        if _signer.verify(message):
            assert _signer.frames(message)[message.delim + 1] == message.signature
        message.header_mentions(b"stream")
        _ = message.msg_type, message.msg_id
        message.parent_msg_id()
        message.content_dict()
        message.ident_bytes()
    except (MalformedMessage, ValueError):
        pass
