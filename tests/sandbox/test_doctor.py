"""The doctor's version checks (the full run is in tests/cli/test_main.py)."""

from __future__ import annotations

from pathlib import Path

from jupyter_sandbox.sandbox.doctor import (
    MIN_DOCKER,
    MIN_RUNC,
    MIN_RUNSC_RELEASE,
    Check,
    exit_code,
    host_write_caps,
    runsc_release,
    version_tuple,
)
from jupyter_sandbox.sandbox.host.size_caps import can_cap
from jupyter_sandbox.sandbox.settings import SandboxSettings


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


def test_runsc_release_is_read_from_debian_and_upstream_version_lines() -> None:
    assert runsc_release("runsc version 0.0~20221219.0") == 20221219
    assert runsc_release("runsc version release-20240729.0") == 20240729
    assert 20221219 < MIN_RUNSC_RELEASE <= 20240729  # Debian 12's own, and its backports'
    assert runsc_release("runsc version 0.0~20240729.0-4~bpo12+2") == 20240729
    assert runsc_release("runsc version unknown") is None


def test_host_write_caps_are_reported_and_their_absence_names_the_fix(tmp_path: Path) -> None:
    off = host_write_caps(SandboxSettings(cap_host_writes=False, state_dir=str(tmp_path)))
    assert off.status == "warn"
    assert "turned off" in off.detail
    assert str(tmp_path) in off.detail
    assert "size-limited filesystem" in off.fix
    on = host_write_caps(SandboxSettings(io_size="64m"))
    assert on.status == ("ok" if can_cap() else "warn")
    if can_cap():
        assert "capped at 64m" in on.detail
