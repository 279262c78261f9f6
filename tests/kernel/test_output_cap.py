"""The per-execution output cap, on real wire messages (as ipykernel's Session frames them)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from jupyter_sandbox.kernel.output_cap import (
    DECODE_BYTES,
    EVALUE_CHARS,
    REPLY_BYTES,
    STATUS_BYTES,
    STATUS_PAST_CAP,
    OutputCap,
)
from jupyter_sandbox.kernel.wire import HEADER_BYTES, Signer, WireMessage, as_bytes, parse

SIGNER = Signer(b"key")
CELL = SIGNER.session.msg("execute_request", {"code": "flood()"})
RUNNING = str(CELL["header"]["msg_id"])
REQUEST = parse(list(SIGNER.session.serialize(CELL, ident=[b"frontend"])))


def output(
    msg_type: str,
    content: dict[str, object],
    cell: dict[str, Any] = CELL,
    metadata: dict[str, object] | None = None,
    buffers: list[bytes] | None = None,
) -> WireMessage:
    """A message as the sandbox's kernel would send it, under ``cell``'s header as parent."""
    msg = SIGNER.session.msg(msg_type, content, parent=cell["header"], metadata=metadata or {})
    if buffers:
        msg["buffers"] = buffers
    return parse(list(SIGNER.session.serialize(msg, ident=[b"t"])))


def text_of(message: WireMessage | None) -> str:
    assert message is not None
    return str(json.loads(as_bytes(message.content))["text"])


def stream(text: str) -> WireMessage:
    return output("stream", {"name": "stdout", "text": text})


def relayed_bytes(cap: OutputCap, messages: list[WireMessage], running: str | None) -> int:
    """The bytes of the messages ``cap`` lets through, as the frontend would receive them."""
    total = 0
    for message in messages:
        relayed, _ = cap.admit(message, running)
        if relayed is not None:
            total += sum(len(frame) for frame in relayed.frames[relayed.delim + 2 :])
    return total


def test_output_under_the_limit_passes_untouched() -> None:
    cap = OutputCap(10_000)
    message = stream("hello\n")
    assert cap.admit(message, RUNNING) == (message, None)


def test_the_crossing_stream_is_cut_and_carries_the_notice_then_the_rest_is_dropped() -> None:
    cap = OutputCap(2_000)
    assert cap.admit(stream("a" * 600), RUNNING)[0] is not None
    cut, notice = cap.admit(stream("b" * 1500), RUNNING)
    assert notice is None
    text = text_of(cut)
    assert text.startswith("b")
    assert "b" * 1500 not in text
    assert "this cell's output passed" in text
    assert "c.SandboxSettings.max_cell_output" in text
    assert cap.admit(stream("c" * 10), RUNNING) == (None, None)


def test_rich_output_that_crosses_is_dropped_whole_with_a_notice() -> None:
    cap = OutputCap(1_000)
    image = output("display_data", {"data": {"image/png": "x" * 5_000}, "metadata": {}})
    relayed, notice = cap.admit(image, RUNNING)
    assert relayed is None
    assert notice is not None
    assert "/workspace" in notice


def test_errors_count_against_the_cap() -> None:
    """Issue 31: 16 MB of error messages reached the client under a 1 MiB cap."""
    cap = OutputCap(10_000)
    errors = [
        output("error", {"ename": "E", "evalue": "v" * 1000, "traceback": ["t" * 1000]})
        for _ in range(100)
    ]
    first_past, notice = None, None
    for error in errors:
        relayed, notice = cap.admit(error, RUNNING)
        if relayed is None:
            first_past = error
            break
    assert first_past is not None
    assert notice is not None  # the error that crossed is dropped whole, and the cell told
    assert relayed_bytes(cap, errors, RUNNING) == 0  # the rest: nothing


def test_every_kind_of_iopub_message_counts() -> None:
    """Comms, display updates, clears and execute_input reach the frontend as a print does."""
    kinds: list[tuple[str, dict[str, object]]] = [
        ("comm_open", {"comm_id": "c", "target_name": "t", "data": {"x": "y" * 3000}}),
        ("comm_msg", {"comm_id": "c", "data": {"x": "y" * 3000}}),
        ("update_display_data", {"data": {"text/plain": "y" * 3000}, "transient": {}}),
        ("clear_output", {"wait": False, "pad": "y" * 3000}),
        ("execute_input", {"code": "y" * 3000, "execution_count": 1}),
    ]
    for msg_type, content in kinds:
        cap = OutputCap(10_000)
        messages = [output(msg_type, content) for _ in range(20)]
        assert relayed_bytes(cap, messages, RUNNING) <= 10_000, msg_type


def test_headers_metadata_and_buffers_count_too() -> None:
    cap = OutputCap(10_000)
    in_metadata = [output("comm_msg", {"comm_id": "c"}, metadata={"m": "y" * 3000})] * 20
    assert relayed_bytes(cap, in_metadata, RUNNING) <= 10_000
    cap = OutputCap(10_000)
    in_buffers = [output("comm_msg", {"comm_id": "c"}, buffers=[b"y" * 3000]) for _ in range(20)]
    assert relayed_bytes(cap, in_buffers, RUNNING) <= 10_000
    cap = OutputCap(10_000)
    big_parent = {"header": {**CELL["header"], "pad": "y" * 3000}}
    in_parent = [output("stream", {"name": "stdout", "text": "."}, cell=big_parent)] * 20
    assert relayed_bytes(cap, in_parent, RUNNING) <= 10_000


def test_a_parent_chosen_by_the_sandbox_gets_no_budget_of_its_own() -> None:
    """Issue 31: the cap was kept per parent msg_id, which the sandbox writes; a fresh one per
    message passed everything."""
    cap = OutputCap(10_000)
    messages = [
        output(
            "stream",
            {"name": "stdout", "text": "x" * 1000},
            cell={"header": {**CELL["header"], "msg_id": uuid.uuid4().hex}},
        )
        for _ in range(100)
    ]
    assert relayed_bytes(cap, messages, RUNNING) <= 10_000 + 1000


def test_between_executions_output_has_one_budget_renewed_as_an_execution_ends() -> None:
    cap = OutputCap(10_000)
    lines = [stream("x" * 1000) for _ in range(30)]
    assert relayed_bytes(cap, lines, None) <= 11_000
    assert cap.admit(stream("y"), None) == (None, None)
    cap.forget(RUNNING)  # an execution ended: what comes before the next one has a new budget
    fresh = stream("z")
    assert cap.admit(fresh, None) == (fresh, None)


def test_executions_are_counted_apart_and_forgotten() -> None:
    cap = OutputCap(1_000)
    cap.admit(stream("x" * 2000), RUNNING)
    other = str(uuid.uuid4())
    fresh = stream("1\n")
    assert cap.admit(fresh, other) == (fresh, None)
    assert cap.admit(stream("y"), RUNNING) == (None, None)
    cap.forget(RUNNING)
    again = stream("y")
    assert cap.admit(again, RUNNING) == (again, None)


def test_past_the_cap_small_status_messages_pass_a_bounded_number_of_times() -> None:
    """A frontend waits for its requests' idle: it passes a flood, but a flood of status
    messages does not."""
    cap = OutputCap(1_000)
    cap.admit(stream("x" * 2000), RUNNING)
    idle = output("status", {"execution_state": "idle"})
    assert cap.admit(idle, RUNNING) == (idle, None)
    padded = output("status", {"execution_state": "idle", "pad": "y" * 5000})
    assert cap.admit(padded, RUNNING) == (None, None)
    passed = sum(cap.admit(idle, RUNNING)[0] is not None for _ in range(2 * STATUS_PAST_CAP))
    assert passed == STATUS_PAST_CAP - 1


@pytest.mark.parametrize("limit", [20 * 1024**2, 0])
def test_frames_no_kernel_sends_are_dropped_before_the_cap_and_without_one(limit: int) -> None:
    """Before the cap only the header was bounded: a parent header or metadata of megabytes,
    and a status of any size (Jupyter Server decodes each status's content), passed."""
    cap = OutputCap(limit)
    pad = "y" * HEADER_BYTES
    big_parent = {"header": {**CELL["header"], "pad": pad}}
    dropped = [
        output("stream", {"name": "stdout", "text": "."}, cell=big_parent),
        output("stream", {"name": "stdout", "text": "."}, metadata={"pad": pad}),
        output("status", {"execution_state": "idle", "pad": "y" * STATUS_BYTES}),
        output("status", {"execution_state": "busy"}, metadata={"pad": "y" * STATUS_BYTES}),
    ]
    for message in dropped:
        assert cap.admit(message, RUNNING) == (None, None)
        assert cap.admit(message, None) == (None, None)
    # What ipykernel sends, and output of any size under the cap, still pass.
    kept = [
        output("status", {"execution_state": "idle"}),
        output("stream", {"name": "stdout", "text": "x" * (4 * HEADER_BYTES)}),
        output("stream", {"name": "stdout", "text": "."}, metadata={"pad": "y" * 1000}),
    ]
    for message in kept:
        assert cap.admit(message, RUNNING) == (message, None)


def test_a_crossing_stream_that_is_not_an_object_is_dropped_with_the_notice() -> None:
    cap = OutputCap(100)
    msg = SIGNER.session.msg("stream", {}, parent=CELL["header"])
    message = parse(list(SIGNER.session.serialize(msg, ident=[b"t"])))
    message.content = json.dumps(["x" * 500]).encode()
    relayed, notice = cap.admit(message, RUNNING)
    assert relayed is None
    assert notice is not None


def test_no_limit() -> None:
    unlimited = OutputCap(0)
    big = stream("z" * 100_000)
    assert unlimited.admit(big, RUNNING) == (big, None)


def error_reply(evalue: str, **fields: object) -> WireMessage:
    content = {"status": "error", "execution_count": 3, "ename": "ValueError", "evalue": evalue}
    return output("execute_reply", {**content, "traceback": [evalue], **fields})


def test_a_reply_that_fits_passes_as_it_came() -> None:
    cap = OutputCap(10_000)
    reply = error_reply("small")
    assert cap.admit_reply(reply, REQUEST) is reply
    cap.admit(stream("x" * 20_000), RUNNING)  # the budget spent: a reply up to REPLY_BYTES
    ok = output("execute_reply", {"status": "ok", "execution_count": 3, "payload": ["p" * 1000]})
    assert cap.admit_reply(ok, REQUEST) is ok


def test_an_oversized_reply_is_rebuilt_small_under_the_requests_header() -> None:
    """ipykernel's execute_reply repeats the exception: a 16 MB one passed on shell too."""
    cap = OutputCap(10_000)
    forged = {"header": {**CELL["header"], "msg_id": "not-the-request"}}
    big = output(
        "execute_reply",
        {
            "status": "error",
            "execution_count": 3,
            "ename": "ValueError",
            "evalue": "e" * 2**20,
            "traceback": ["t" * 2**20],
        },
        cell=forged,
        metadata={"m": "y" * 2**16},
        buffers=[b"b" * 2**16],
    )
    rebuilt = cap.admit_reply(big, REQUEST)
    frames = rebuilt.frames[rebuilt.delim + 2 :]
    assert len(frames) == 4  # no buffers
    assert sum(len(frame) for frame in frames) < 4096
    assert rebuilt.msg_type == "execute_reply"
    assert rebuilt.parent_msg_id() == RUNNING  # the request's, not what the sandbox named
    content = rebuilt.content_dict()
    assert (content["status"], content["execution_count"], content["ename"]) == (
        "error",
        3,
        "ValueError",
    )
    assert content["evalue"] == "e" * EVALUE_CHARS
    assert "this cell's output passed" in content["traceback"][0]
    assert SIGNER.verify(parse(SIGNER.frames(rebuilt)))  # signed anew as the relay does


ROW_74 = pytest.mark.checklist(
    row=74,
    attack="the sandbox's kernel sends an execute_reply or a cap-crossing stream whose content is "
    "JSON nested 200,000 deep, holds NaN or repeated keys, or is past 16 MiB",
    expected="read by the strict reader of sandbox JSON: the reply rebuilt small, the stream "
    "dropped whole with the notice; no RecursionError out of the relay, no unbounded decoding",
)


@ROW_74
def test_a_reply_the_strict_reader_refuses_is_rebuilt_from_nothing_of_it(
    observe: Callable[..., None],
) -> None:
    """json.loads of the sandbox's reply raised RecursionError out of the relay's hook."""
    for raw in (
        b"[" * 200_000,
        b'{"status": "ok", "execution_count": NaN, "x": "' + b"y" * REPLY_BYTES + b'"}',
    ):
        cap = OutputCap(1_000)
        reply = output("execute_reply", {})
        reply.content = raw
        content = cap.admit_reply(reply, REQUEST).content_dict()
        assert (content["status"], content["execution_count"]) == ("error", None)
    observe("both replies rebuilt small (status error, no count), nothing decoded of them", 2)


@ROW_74
def test_a_crossing_stream_the_strict_reader_refuses_is_dropped_whole(
    observe: Callable[..., None],
) -> None:
    """Nested past the stack (RecursionError before), or past DECODE_BYTES (decoded whole
    before, to show a few bytes of it): not cut, dropped, with the notice."""
    for raw in (
        b"[" * 200_000,
        json.dumps({"name": "stdout", "text": "z" * DECODE_BYTES}).encode(),
    ):
        cap = OutputCap(2_000)
        message = stream("x")
        message.content = raw
        relayed, notice = cap.admit(message, RUNNING)
        assert relayed is None
        assert notice is not None
        assert "this cell's output passed" in notice
    observe("both streams dropped whole, the notice sent in their place", 2)


def test_a_reply_that_is_not_an_object_is_rebuilt_too() -> None:
    cap = OutputCap(1_000)
    reply = output("execute_reply", {})
    reply.content = json.dumps(["x" * REPLY_BYTES]).encode()
    content = cap.admit_reply(reply, REQUEST).content_dict()
    assert content["status"] == "error"
    assert content["execution_count"] is None
