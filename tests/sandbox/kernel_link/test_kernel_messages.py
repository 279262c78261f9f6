"""How the server's own kernel clients read what a sandbox's kernel sends (kernel_messages.py):
the reading in steps without an engine, then a real sandbox's kernel signing hostile messages
during a code run, on both runtimes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from jupyter_client.session import Session

from jupyter_sandbox.kernel.wire import DELIM, MalformedMessage
from jupyter_sandbox.sandbox.kernel_link import execution
from jupyter_sandbox.sandbox.kernel_link.kernel_messages import StrictSession, decode
from jupyter_sandbox.sandbox.limits import format_size
from jupyter_sandbox.sandbox.manager import Sandbox, SandboxManager
from jupyter_sandbox.sandbox.operations.code_runs import CodeRequest, run_code

KEY = b"k" * 32
DATE = "2024-01-01T00:00:00.000000Z"


def frames(session: Session, parent: str, **fields: object) -> list[bytes]:
    """A stream message signed with ``session``'s key, whose parent is request ``parent``;
    ``fields`` go into its header (the sandbox's code can put anything there)."""
    msg = session.msg("stream", {"name": "stdout", "text": "x"}, parent={"msg_id": parent})
    msg["header"].update(fields)
    serialized: list[bytes] = session.serialize(msg)
    return serialized


def raw(session: Session, parent: bytes, content: bytes) -> list[bytes]:
    """A message of raw JSON frames, signed."""
    header = b'{"msg_id": "m", "msg_type": "stream"}'
    parts = [header, parent, b"{}", content]
    return [DELIM, session.sign(parts), *parts]


def test_dates_are_not_parsed_and_a_large_header_is_not_read() -> None:
    session = StrictSession(key=KEY)
    read = decode(session, frames(session, "r1", date=DATE), request="r1", content_bytes=1024)
    assert read is not None
    assert read["dropped"] is None
    assert read["header"]["date"] == DATE  # a string, as sent: no extract_dates
    assert read["content"] == {"name": "stdout", "text": "x"}
    # A header past its bound is not decoded: the request's reader is told it was dropped.
    big = frames(session, "r1", dates=[DATE] * 4000)
    read = decode(session, big, request="r1", content_bytes=1024)
    assert read is not None
    assert read["dropped"] is not None
    assert "header" in read["dropped"]
    assert (read["msg_type"], read["content"]) == ("", {})
    with pytest.raises(MalformedMessage, match="header"):  # a plain get_msg raises, as on a bad
        session.deserialize(big[1:])  # signature, rather than decode it


def test_another_request_s_message_is_never_decoded_past_its_parent() -> None:
    session = StrictSession(key=KEY)
    # Not JSON at all: decoding it would raise; it is another request's, so nothing is.
    other = raw(session, b'{"msg_id": "someone else"}', b"[" * 100_000)
    assert decode(session, other, request="r1", content_bytes=10**6) is None
    ours = raw(session, b'{"msg_id": "r1"}', b"[" * 100_000)
    read = decode(session, ours, request="r1", content_bytes=10**6)
    assert read is not None
    assert "content" in str(read["dropped"])


def test_a_content_past_the_bound_is_dropped_unread() -> None:
    session = StrictSession(key=KEY)
    nested = b"[" + b"[]," * 100_000 + b"[]]"
    message = raw(session, b'{"msg_id": "r1"}', b'{"data": ' + nested + b"}")
    read = decode(session, message, request="r1", content_bytes=len(nested) // 2)
    assert read is not None
    assert read["content"] == {}
    assert "more than the" in str(read["dropped"])


def test_a_message_not_signed_with_the_key_is_refused() -> None:
    session = StrictSession(key=KEY)
    forged = frames(Session(key=b"x" * 32), "r1")
    with pytest.raises(MalformedMessage, match="signature"):
        decode(session, forged, request="r1", content_bytes=1024)
    with pytest.raises(ValueError, match="signature"):  # as jupyter_client's get_msg raises
        session.deserialize(forged[1:])


@contextmanager
def loop_lag() -> Iterator[Callable[[], float]]:
    """The longest the event loop went without running a ticker that asks every 10 ms."""
    worst = 0.0

    async def tick() -> None:
        nonlocal worst
        while True:
            before = time.monotonic()
            await asyncio.sleep(0.01)
            worst = max(worst, time.monotonic() - before - 0.01)

    ticker = asyncio.ensure_future(tick())
    try:
        yield lambda: worst
    finally:
        ticker.cancel()


# Code that, during its own run, signs and publishes with the kernel's key: a 23 MB header of
# date strings, then a display of nested empty lists (28 MB of content, past the run's bound).
HOSTILE = """
from IPython import get_ipython
kernel = get_ipython().kernel
session, parent = kernel.session, kernel.get_parent()
msg = session.msg("stream", {"name": "stdout", "text": "never shown"}, parent=parent)
msg["header"]["dates"] = ["2024-01-01T00:00:00.000000Z"] * 800_000
session.send(kernel.iopub_socket, msg)
del msg
nested = {"data": {"text/plain": [[]] * 7_000_000}, "metadata": {}}
session.send(kernel.iopub_socket, "display_data", nested, parent=parent)
del nested
print("after")
"""


@pytest.mark.checklist(
    row=126,
    attack="code in a sandbox signs messages with its kernel's key during a code run over the "
    "server's own clients: a 23 MB header of 800,000 ISO date strings, and a 28 MB content of "
    "nested empty lists (the server decoded both whole, dates parsed, on its one event loop)",
    expected="neither is decoded: the server's event loop stays responsive (lag well under "
    "half a second), the run completes with the rest of its output and is told what was "
    "dropped, and the next run works",
)
async def test_hostile_messages_during_a_run_never_hold_the_server_s_loop(
    manager: SandboxManager, sandbox: Sandbox, observe: Callable[..., None]
) -> None:
    request = CodeRequest(HOSTILE, 120)
    with loop_lag() as lag:
        result = await run_code(manager, "alice", sandbox.sandbox_id, request)
    assert lag() < 0.5, lag()
    assert result.status == "ok", result
    assert result.stdout == "after\n", result.stdout[:200]
    assert "never shown" not in result.stdout
    assert result.outputs == []
    assert "2 message(s) the server does not read" in result.stderr, result.stderr[:500]
    assert f"more than {format_size(execution.MAX_CONTENT_BYTES)} of content" in result.stderr
    after = await run_code(manager, "alice", sandbox.sandbox_id, CodeRequest("6 * 7", 30))
    assert after.outputs[0]["data"]["text/plain"] == "42", after
    observe(
        f"a 23 MB date-string header and a 28 MB nested-list content in one run: the server's "
        f"loop lagged {lag() * 1000:.0f} ms at most; the run completed, told 2 messages were "
        "dropped; the next run answered"
    )
