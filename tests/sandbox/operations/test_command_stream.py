"""The pieces of a streamed command that need no engine: decoding output as it comes, and the
bounded crossing from the engine's thread to the event loop. Streaming commands end to end:
tests/server_extension/test_commands.py and tests/cli/test_sandboxes.py."""

from __future__ import annotations

import asyncio
import time

import pytest

from jupyter_sandbox.sandbox.operations.command_stream import (
    QUEUE_CHUNKS,
    Channel,
    OutputDecoder,
    _joined,
)


def test_a_character_split_between_pieces_comes_whole_with_the_second() -> None:
    decoder = OutputDecoder()
    assert decoder.decode("stdout", b"caf\xc3") == "caf"
    assert decoder.decode("stderr", b"\xe2\x82") == ""  # each stream its own decoder
    assert decoder.decode("stdout", b"\xa9!") == "é!"
    assert decoder.decode("stderr", b"\xac") == "€"
    four = "🙂".encode()
    assert [decoder.decode("stdout", bytes([byte])) for byte in four] == ["", "", "", "🙂"]
    assert decoder.flush() == []


def test_bytes_that_are_no_utf8_are_replaced_and_so_is_an_unfinished_end() -> None:
    decoder = OutputDecoder()
    assert decoder.decode("stdout", b"a\xffb\xc3") == "a\ufffdb"
    assert decoder.decode("stderr", b"\xf0\x9f") == ""
    assert decoder.flush() == [("stdout", "\ufffd"), ("stderr", "\ufffd")]


async def test_a_sender_waits_while_the_queue_is_full() -> None:
    channel = Channel(asyncio.get_running_loop())
    sent: list[int] = []

    def sender() -> None:  # as the engine's executor thread would
        for index in range(QUEUE_CHUNKS + 5):
            channel.send("stdout", b"%d" % index)
            sent.append(index)

    run = asyncio.ensure_future(asyncio.to_thread(sender))
    await asyncio.sleep(0.3)
    assert len(sent) == QUEUE_CHUNKS  # held back: nobody took anything yet
    taken = await channel.next(run)  # everything that arrived, at once
    assert taken == [("stdout", b"%d" % index) for index in range(QUEUE_CHUNKS)]
    while len(taken) < QUEUE_CHUNKS + 5:  # room made: the rest follows
        taken += await channel.next(run) or []
    assert taken == [("stdout", b"%d" % index) for index in range(QUEUE_CHUNKS + 5)]
    assert await channel.next(run) is None  # the sender ended, nothing is left
    assert run.done()


def test_consecutive_pieces_of_one_stream_go_as_one() -> None:
    pieces = [("stdout", b"a"), ("stdout", b"b"), ("stderr", b"!"), ("stdout", b"c")]
    assert _joined(pieces) == [("stdout", b"ab"), ("stderr", b"!"), ("stdout", b"c")]


async def test_closing_frees_a_waiting_sender_and_refuses_the_next() -> None:
    channel = Channel(asyncio.get_running_loop())
    failures: list[BaseException] = []
    sent = 0

    def sender() -> None:
        nonlocal sent
        try:
            for _ in range(QUEUE_CHUNKS + 1):
                channel.send("stderr", b"x")
                sent += 1
        except Exception as exc:  # what the engine's thread would see
            failures.append(exc)

    started = time.monotonic()
    run = asyncio.ensure_future(asyncio.to_thread(sender))
    await asyncio.sleep(0.3)
    assert not run.done()  # no room left: the sender waits
    assert sent == QUEUE_CHUNKS
    channel.close()
    await asyncio.wait_for(run, 5)
    assert time.monotonic() - started < 5
    assert [type(exc).__name__ for exc in failures] == ["_ReaderGone"]
    assert await channel.next(run) is None  # what had arrived was dropped


async def test_next_ends_when_the_sender_fails_with_nothing_queued() -> None:
    channel = Channel(asyncio.get_running_loop())

    async def fails() -> None:
        raise RuntimeError("the exec failed before any output")

    run = asyncio.ensure_future(fails())
    assert await channel.next(run) is None
    with pytest.raises(RuntimeError):
        run.result()
