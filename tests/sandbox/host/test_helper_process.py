"""Starting a sandbox's host helper process and reading its first answer."""

from __future__ import annotations

from pathlib import Path

from jupyter_sandbox.sandbox.host import helper_process
from jupyter_sandbox.sandbox.host.helper_process import reap, start_helper

MODULE = "jupyter_sandbox.sandbox.workspace.refresh"  # a real helper, stopped before its work


def test_the_first_line_is_the_answer_and_the_ended_helper_is_reaped(tmp_path: Path) -> None:
    log = tmp_path / "helper.log"
    child, line = start_helper(
        MODULE, [str(tmp_path / "gone"), str(tmp_path), str(tmp_path)], log, timeout=60
    )
    assert line == f"error: {tmp_path / 'gone'} is gone"  # its sandbox's directory
    assert child.wait(timeout=60) == 1
    assert child in helper_process._children
    reap()
    assert child not in helper_process._children


def test_a_helper_that_says_nothing_answers_empty_and_its_errors_are_logged(
    tmp_path: Path,
) -> None:
    log = tmp_path / "helper.log"
    log.write_text("before\n")
    child, line = start_helper(MODULE, ["too", "few"], log, timeout=60)
    assert line == ""
    assert child.wait(timeout=60) == 2
    text = log.read_text()
    assert text.startswith("before\n")  # appended to
    assert "python -m jupyter_sandbox.sandbox.workspace.refresh ROOT LOWER UPPER" in text
    reap()
