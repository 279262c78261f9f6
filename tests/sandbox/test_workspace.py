"""Which launch directories /workspace may show."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_sandbox.sandbox.workspace import plan_workspace


def test_a_notebook_folder_is_shown_in_the_chosen_mode(tmp_path: Path) -> None:
    for mode in ("copy-on-write", "read-only", "read-write"):
        plan = plan_workspace(mode, str(tmp_path))
        assert (plan.mode, plan.source, plan.note) == (mode, str(tmp_path.resolve()), "")


@pytest.mark.parametrize(
    ("directory", "reason"),
    [
        ("/", "filesystem root"),
        ("/etc", "system directory"),
        ("/proc/self", "system directory"),
        (str(Path.home()), "home directory"),
    ],
)
def test_sensitive_directories_are_never_shown(directory: str, reason: str) -> None:
    plan = plan_workspace("copy-on-write", directory)
    assert plan.mode == "none"
    assert plan.source is None
    assert reason in plan.note


def test_no_launch_directory_or_mode_none_shows_nothing(tmp_path: Path) -> None:
    assert plan_workspace("copy-on-write", None).source is None
    assert plan_workspace("none", str(tmp_path)).source is None


def test_overlay_unsafe_names_fall_back_to_read_only(tmp_path: Path) -> None:
    odd = tmp_path / "a,b:c"
    odd.mkdir()
    plan = plan_workspace("copy-on-write", str(odd))
    assert plan.mode == "read-only"
    assert "shown read-only" in plan.note
