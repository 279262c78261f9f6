"""What a run watcher reads from the CLI's pipe and keeps of the kernel's iopub. Its interrupt
of a killed CLI's run, with a real kernel, is tested in tests/cli/test_code_lifetime.py."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from jupyter_sandbox.sandbox.host.watcher_pipe import DONE
from jupyter_sandbox.sandbox.operations.run_watcher import MAX_SEEN, Requests, read_run

MESSAGE_ID = "5d2c1e0f-0a1b2c3d4e5f6a7b8c9d0e1f_1234_7"  # as jupyter_client makes them


def written(data: bytes) -> int:
    """The read end of a pipe holding ``data``, its write end closed (the CLI gone)."""
    read_fd, write_fd = os.pipe()
    os.write(write_fd, data)
    os.close(write_fd)
    return read_fd


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (MESSAGE_ID.encode() + b"\n" + DONE, (MESSAGE_ID, True)),  # the run ended in order
        (MESSAGE_ID.encode() + b"\n", (MESSAGE_ID, False)),  # the CLI killed during the run
        (DONE, (None, True)),  # it ended before it sent the run
        # An id that begins with a letter DONE once was is an id (its run was left unwatched).
        (b"d" + MESSAGE_ID.encode()[1:] + b"\n", ("d" + MESSAGE_ID[1:], False)),
        (b"d" + MESSAGE_ID.encode()[1:] + b"\n" + DONE, ("d" + MESSAGE_ID[1:], True)),
        (b"", (None, False)),  # it was killed before it sent the run
    ],
)
def test_what_the_cli_wrote(data: bytes, expected: tuple[str | None, bool]) -> None:
    fd = written(data)
    try:
        assert read_run(fd) == expected
    finally:
        os.close(fd)


@pytest.mark.parametrize("data", [b"x/../y\n", b"a" * 200 + b"\n", b"id with spaces\n"])
def test_anything_but_a_message_id_is_refused(data: bytes) -> None:
    fd = written(data)
    try:
        with pytest.raises(ValueError, match="message id"):
            read_run(fd)
    finally:
        os.close(fd)


def message(parent: object, msg_type: str, content: object) -> dict[str, object]:
    return {"parent_header": parent, "msg_type": msg_type, "content": content}


def test_requests_note_starts_and_ends_and_ignore_malformed_messages() -> None:
    requests = Requests()
    requests.note(message({"msg_id": "a_1_1"}, "execute_input", {"code": ""}))
    requests.note(message({"msg_id": "b_1_2"}, "status", {"execution_state": "idle"}))
    requests.note(message({"msg_id": "c_1_3"}, "status", {"execution_state": "busy"}))
    malformed: list[object] = [None, [], {"msg_id": 7}, {"msg_id": "x" * 500}, {"msg_id": "a b"}]
    for parent in malformed:
        requests.note(message(parent, "execute_input", {}))
    requests.note(message({"msg_id": "d_1_4"}, "status", "idle"))
    assert list(requests.started) == ["a_1_1"]
    assert list(requests.ended) == ["b_1_2"]


def test_requests_remember_a_bounded_number() -> None:
    requests = Requests()
    for n in range(MAX_SEEN + 10):
        requests.note(message({"msg_id": f"m_{n}"}, "execute_input", {}))
    assert len(requests.started) == MAX_SEEN
    assert "m_0" not in requests.started
    assert f"m_{MAX_SEEN + 9}" in requests.started


class Channel:
    """A kernel client's iopub channel as the watcher reads it: messages handed over one by
    one, the read waiting until the next comes (jupyter_client's get_msg with no timeout)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def get_msg(self, timeout: float | None = None) -> dict[str, Any]:
        return await self.queue.get()


async def test_requests_follow_notes_every_message_and_says_when_news_came() -> None:
    requests, channel = Requests(), Channel()
    reader = asyncio.ensure_future(requests.follow(channel))
    try:
        await requests.wait_for_news(0.01)  # nothing came: it returns after its time
        assert not requests.started
        channel.queue.put_nowait(message({"msg_id": "a_1_1"}, "execute_input", {}))
        await asyncio.wait_for(requests.wait_for_news(60), 10)  # returns on the news
        assert list(requests.started) == ["a_1_1"]
        channel.queue.put_nowait(
            message({"msg_id": "a_1_1"}, "status", {"execution_state": "idle"})
        )
        await asyncio.wait_for(requests.wait_for_news(60), 10)
        assert list(requests.ended) == ["a_1_1"]
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
