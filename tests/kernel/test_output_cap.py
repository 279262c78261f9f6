"""The per-cell output cap, on real wire messages (as ipykernel's Session frames them)."""

from __future__ import annotations

import json

from jupyter_sandbox.kernel.output_cap import OutputCap
from jupyter_sandbox.kernel.wire import Signer, WireMessage, as_bytes, parse

SIGNER = Signer(b"key")
CELL = SIGNER.session.msg("execute_request", {"code": "flood()"})


def output(
    msg_type: str, content: dict[str, object], cell: dict[str, object] = CELL
) -> WireMessage:
    frames = SIGNER.new_message(msg_type, content, parent_header=cell["header"], idents=[b"t"])  # type: ignore[arg-type]
    return parse(list(frames))


def text_of(message: WireMessage | None) -> str:
    assert message is not None
    return str(json.loads(as_bytes(message.content))["text"])


def stream(text: str) -> WireMessage:
    return output("stream", {"name": "stdout", "text": text})


def test_output_under_the_limit_passes_untouched() -> None:
    cap = OutputCap(10_000)
    message = stream("hello\n")
    assert cap.admit(message) == (message, None)


def test_the_crossing_stream_is_cut_and_carries_the_notice_then_the_rest_is_dropped() -> None:
    cap = OutputCap(1_000)
    assert cap.admit(stream("a" * 600))[0] is not None
    cut, notice = cap.admit(stream("b" * 600))
    assert notice is None
    text = text_of(cut)
    assert text.startswith("b")
    assert "b" * 600 not in text
    assert "this cell's output passed" in text
    assert "c.SandboxSettings.max_cell_output" in text
    assert cap.admit(stream("c" * 10)) == (None, None)


def test_rich_output_that_crosses_is_dropped_whole_with_a_notice() -> None:
    cap = OutputCap(1_000)
    image = output("display_data", {"data": {"image/png": "x" * 5_000}, "metadata": {}})
    relayed, notice = cap.admit(image)
    assert relayed is None
    assert notice is not None
    assert "/workspace" in notice


def test_errors_and_status_always_pass_and_cells_are_counted_apart() -> None:
    cap = OutputCap(100)
    cap.admit(stream("x" * 200))
    error = output("error", {"ename": "E", "evalue": "v", "traceback": ["t" * 500]})
    status = output("status", {"execution_state": "idle"})
    assert cap.admit(error) == (error, None)
    assert cap.admit(status) == (status, None)
    other_cell = SIGNER.session.msg("execute_request", {"code": "print(1)"})
    fresh = output("stream", {"name": "stdout", "text": "1\n"}, cell=other_cell)
    assert cap.admit(fresh) == (fresh, None)


def test_forgetting_a_cell_and_no_limit() -> None:
    cap = OutputCap(100)
    cap.admit(stream("x" * 200))
    cap.forget(CELL["header"]["msg_id"])  # type: ignore[index]
    message = stream("y")
    assert cap.admit(message) == (message, None)
    unlimited = OutputCap(0)
    big = stream("z" * 100_000)
    assert unlimited.admit(big) == (big, None)
