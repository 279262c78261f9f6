"""CellOutput: a run's output events become what a notebook cell shows at its end, by
JupyterLab's rules, and its size counts what is shown now (the server caps it). The same rules
against a real kernel's output: tests/sandbox/operations/test_code_runs.py and tests/client/."""

from __future__ import annotations

from typing import Any

from jupyter_sandbox.protocol.cell_output import CellOutput, size_of


def display(kind: str, text: str, display_id: str | None = None) -> dict[str, Any]:
    transient = {} if display_id is None else {"display_id": display_id}
    return {"type": kind, "data": {"text/plain": text}, "metadata": {}, "transient": transient}


def shown_after(*events: tuple[str, dict[str, Any]]) -> CellOutput:
    output = CellOutput()
    for name, data in events:
        output.add(name, data)
    return output


def test_text_and_displays_are_kept_in_order() -> None:
    output = shown_after(
        ("stdout", {"text": "a"}),
        ("stderr", {"text": "warn\n"}),
        ("display", display("display_data", "one")),
        ("stdout", {"text": "b\n"}),
        ("display", display("execute_result", "'last'")),
    )
    assert output.answer() == {
        "stdout": "ab\n",
        "stderr": "warn\n",
        "outputs": [display("display_data", "one"), display("execute_result", "'last'")],
    }


def test_clear_output_clears_at_once_or_when_the_next_output_comes() -> None:
    now = shown_after(("stdout", {"text": "gone\n"}), ("clear", {"wait": False}))
    assert now.answer() == {"stdout": "", "stderr": "", "outputs": []}
    assert now.size == 0

    waiting = shown_after(("stdout", {"text": "old\n"}), ("clear", {"wait": True}))
    assert waiting.answer()["stdout"] == "old\n"  # still shown until something replaces it
    waiting.add("stdout", {"text": "new\n"})
    assert waiting.answer()["stdout"] == "new\n"


def test_an_update_replaces_its_display_in_place_and_is_not_a_new_output() -> None:
    output = shown_after(
        ("display", display("display_data", "one", "d1")),
        ("display", display("display_data", "other", "d2")),
        ("display", display("display_data", "one again", "d1")),
        ("clear", {"wait": True}),
        ("display", display("update_display_data", "two", "d1")),
    )
    # both outputs of d1 show the update, d2 is untouched, and the pending clear still waits
    texts = [o["data"]["text/plain"] for o in output.outputs]
    assert texts == ["two", "other", "two"]
    assert all(o["type"] == "display_data" for o in output.outputs)
    output.add("stdout", {"text": "after\n"})
    assert output.answer() == {"stdout": "after\n", "stderr": "", "outputs": []}


def test_an_update_of_nothing_shown_and_unknown_events_are_ignored() -> None:
    output = shown_after(
        ("display", display("update_display_data", "orphan", "nobody")),
        ("display", display("update_display_data", "no id")),
        ("progress", {"text": "not output"}),
    )
    assert output.answer() == {"stdout": "", "stderr": "", "outputs": []}
    assert output.size == 0


def test_a_kept_display_is_a_copy_the_update_does_not_reach_the_callers_dict() -> None:
    given = display("display_data", "one", "d1")
    output = shown_after(("display", given), ("display", display("update_display_data", "2", "d1")))
    assert given["data"] == {"text/plain": "one"}
    assert output.outputs[0]["data"] == {"text/plain": "2"}


def test_size_counts_what_is_shown_now_so_a_display_updated_often_counts_once() -> None:
    first = display("display_data", "0%", "bar")
    output = shown_after(("stdout", {"text": "12345"}), ("display", first))
    assert output.size == 5 + size_of(first)
    for percent in range(1, 101):
        output.add("display", display("update_display_data", f"{percent}%", "bar"))
    assert output.size == 5 + size_of(display("display_data", "100%"))

    twice = shown_after(("display", first), ("display", first))
    twice.add("display", display("update_display_data", "a longer text", "bar"))
    assert twice.size == 2 * size_of(display("display_data", "a longer text"))
