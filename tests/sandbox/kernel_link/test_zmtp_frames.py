"""The ZMTP framing reader: what it passes, what it refuses, and where, whatever the chunks."""

from __future__ import annotations

import pytest

from jupyter_sandbox.sandbox.kernel_link.zmtp_frames import (
    MAX_COMMANDS_IN_A_ROW,
    MAX_PARTS,
    NULL_MECHANISM,
    PART_COST,
    ZmtpError,
    ZmtpReader,
)

GREETING = b"\xff" + bytes(7) + b"\x01\x7f" + b"\x03\x01" + NULL_MECHANISM + b"\x00" + bytes(31)


def frame(body: bytes, *, more: bool = False, long: bool = False, command: bool = False) -> bytes:
    flags = (0x01 if more else 0) | (0x04 if command else 0)
    if long or len(body) > 255:
        return bytes([flags | 0x02]) + len(body).to_bytes(8, "big") + body
    return bytes([flags, len(body)]) + body


READY = frame(b"\x05READY\x0bSocket-Type\x00\x00\x00\x06ROUTER", command=True)


def message(*parts: bytes) -> bytes:
    return b"".join(frame(part, more=i < len(parts) - 1) for i, part in enumerate(parts))


def read(stream: bytes, bound: int = 10_000, chunk: int = 0) -> ZmtpReader:
    """Feed ``stream`` whole, or in chunks of ``chunk`` bytes."""
    reader = ZmtpReader(bound)
    step = chunk or len(stream) or 1
    for at in range(0, len(stream), step):
        reader.feed(stream[at : at + step])
    return reader


@pytest.mark.parametrize("chunk", [0, 1, 2, 3, 7, 9, 10, 64])
def test_a_stream_is_followed_in_any_chunks(chunk: int) -> None:
    stream = (
        GREETING
        + READY
        + message(b"id", b"<IDS|MSG>", b"sig", b"{}", b"{}", b"{}", b"{}")
        + message(b"x" * 300, b"")  # a long frame, an empty one
        + frame(b"", long=True)  # a short size sent long: ZMTP allows it
    )
    assert read(stream, chunk=chunk).messages == 3


def test_a_message_is_refused_at_the_part_that_passes_the_bound() -> None:
    within = GREETING + READY + message(b"x" * 1000, b"y" * 1000)
    assert read(within, bound=2000 + 2 * PART_COST).messages == 1
    with pytest.raises(ZmtpError, match="a kernel message of more than"):
        read(within, bound=2000 + 2 * PART_COST - 1)
    # The refusal comes with the header, before any of the body is fed.
    reader = ZmtpReader(1000)
    reader.feed(GREETING + READY)
    with pytest.raises(ZmtpError):
        reader.feed(frame(b"", long=True)[:1] + (2**63).to_bytes(8, "big"))


def test_many_small_parts_cost_what_they_hold_for_their_receiver() -> None:
    many = GREETING + message(*[b""] * 100)
    assert read(many, bound=100 * PART_COST).messages == 1
    with pytest.raises(ZmtpError):
        read(many, bound=100 * PART_COST - 1)
    with pytest.raises(ZmtpError, match=f"more than {MAX_PARTS} parts"):
        read(GREETING + message(*[b""] * (MAX_PARTS + 1)), bound=2**40)


def test_the_bound_counts_each_message_afresh() -> None:
    stream = GREETING + message(b"x" * 500) * 10
    assert read(stream, bound=500 + PART_COST).messages == 10


@pytest.mark.parametrize(
    ("greeting", "why"),
    [
        (b"\x00" + GREETING[1:], "not a ZMTP greeting"),
        (GREETING[:9] + b"\x00" + GREETING[10:], "not a ZMTP greeting"),
        (GREETING[:10] + b"\x02" + GREETING[11:], "ZMTP version 2"),
        (GREETING[:12] + b"CURVE".ljust(20, b"\0") + GREETING[32:], "mechanism other than NULL"),
        (GREETING[:32] + b"\x02" + GREETING[33:], "as-server byte of 2"),
    ],
)
def test_a_greeting_other_than_zmtp_3_with_null_is_refused(greeting: bytes, why: str) -> None:
    with pytest.raises(ZmtpError, match=why):
        read(greeting)


@pytest.mark.parametrize(
    ("stream", "why"),
    [
        (bytes([0x08, 0]), "undefined ZMTP frame flags 0x08"),
        (bytes([0x80, 0]), "undefined ZMTP frame flags 0x80"),
        (frame(b"x", more=True) + READY, "command inside a multipart message"),
        (frame(b"PING", command=True, more=True), "command inside a multipart message"),
        (frame(b"x" * 5000, command=True), "a ZMTP command of 5000 bytes"),
        (READY * (MAX_COMMANDS_IN_A_ROW + 1), f"more than {MAX_COMMANDS_IN_A_ROW} ZMTP commands"),
    ],
)
def test_framing_zmtp_does_not_define_is_refused(stream: bytes, why: str) -> None:
    with pytest.raises(ZmtpError, match=why):
        read(GREETING + stream)


def test_commands_between_messages_are_taken() -> None:
    stream = GREETING + (READY * MAX_COMMANDS_IN_A_ROW + message(b"x")) * 3
    assert read(stream).messages == 3
