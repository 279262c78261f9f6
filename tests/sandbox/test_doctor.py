"""The doctor's version checks (the full run is in tests/test_cli.py)."""

from __future__ import annotations

from jupyter_sandbox.sandbox.doctor import MIN_DOCKER, MIN_RUNC, Check, exit_code, version_tuple


def test_versions_are_read_from_what_tools_print() -> None:
    assert version_tuple("20.10.24+dfsg1") == (20, 10, 24)
    assert version_tuple("runc version 1.1.5+ds1") == (1, 1, 5)
    assert version_tuple("26.0") == (26, 0, 0)
    assert version_tuple("unknown") == ()


def test_escape_fix_thresholds() -> None:
    assert version_tuple("20.10.24") < MIN_DOCKER <= version_tuple("26.1.4")
    assert version_tuple("1.1.5") < MIN_RUNC <= version_tuple("1.2.8")


def test_any_failure_makes_a_non_zero_exit() -> None:
    ok = Check("engine", "ok", "fine")
    warn = Check("engine version", "warn", "old", "upgrade")
    assert exit_code([ok, warn]) == 0
    assert exit_code([ok, Check("image", "fail", "missing", "jupyter sandbox build-image")]) == 1
    assert "fix: upgrade" in warn.line()
