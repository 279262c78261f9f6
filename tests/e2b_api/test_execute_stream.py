"""How /execute's output is cut for E2B's per-line callbacks (no engine needed)."""

from __future__ import annotations

from jupyter_sandbox.e2b_api.execute_stream import StreamLines, result_of


def test_a_line_published_in_pieces_goes_whole() -> None:
    lines = StreamLines()
    assert lines.add("stdout", "line 1") == []
    assert lines.add("stdout", "\nline 2\nli") == [("stdout", "line 1\n"), ("stdout", "line 2\n")]
    assert lines.add("stderr", "oops\n") == [("stdout", "li"), ("stderr", "oops\n")]
    assert lines.flush() == []


def test_the_rest_of_a_line_goes_before_anything_else() -> None:
    lines = StreamLines()
    lines.add("stdout", "no newline")
    assert lines.flush() == [("stdout", "no newline")]


def test_a_bundle_takes_e2bs_names_and_keeps_the_others() -> None:
    result = result_of({"text/plain": "42", "image/png": "iVBO", "application/x-mine": 1}, True)
    assert result == {
        "type": "result",
        "is_main_result": True,
        "text": "42",
        "png": "iVBO",
        "extra": {"application/x-mine": 1},
    }
