"""SandboxUsage: operations in a sandbox count as its activity, and keep it in use meanwhile."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_sandbox.sandbox.hostdir import SandboxDirectory
from jupyter_sandbox.sandbox.usage import RECORD_INTERVAL, SandboxUsage

SANDBOX = "0123456789ab"


@pytest.fixture
def directory(tmp_path: Path) -> SandboxDirectory:
    directory = SandboxDirectory(tmp_path, SANDBOX)
    directory.root.mkdir()
    directory.update_state(last_activity="2026-01-01T00:00:00+00:00")
    return directory


def usage_of(directory: SandboxDirectory, interval: float = RECORD_INTERVAL) -> SandboxUsage:
    def update_state(sandbox_id: str, **changes: Any) -> dict[str, Any]:
        assert sandbox_id == SANDBOX
        return directory.update_state(**changes)

    return SandboxUsage(update_state, interval)


def test_an_operation_is_recorded_at_its_start_and_end_and_in_use_between(
    directory: SandboxDirectory,
) -> None:
    usage = usage_of(directory, interval=0)  # every record written
    with usage.using(SANDBOX):
        began = directory.read_state()["last_activity"]
        assert began > "2026-01-01"
        assert usage.in_use(SANDBOX)
        with usage.using(SANDBOX):  # two at once: in use until both end
            pass
        assert usage.in_use(SANDBOX)
        directory.update_state(last_activity="2026-01-01T00:00:00+00:00")
    assert not usage.in_use(SANDBOX)
    assert directory.read_state()["last_activity"] > "2026-01-01"


def test_a_failed_operation_ends_its_use_too(directory: SandboxDirectory) -> None:
    usage = usage_of(directory)
    with pytest.raises(RuntimeError), usage.using(SANDBOX):
        raise RuntimeError("the command failed")
    assert not usage.in_use(SANDBOX)


def test_a_removed_sandbox_is_no_error(tmp_path: Path) -> None:
    usage = usage_of(SandboxDirectory(tmp_path, SANDBOX))  # never made: writing its state fails
    with usage.using(SANDBOX):
        assert usage.in_use(SANDBOX)
    assert not usage.in_use(SANDBOX)


def test_operations_in_a_row_are_recorded_at_most_once_an_interval(
    directory: SandboxDirectory,
) -> None:
    usage = usage_of(directory, interval=0.3)
    long_ago = "2026-01-01T00:00:00+00:00"
    with usage.using(SANDBOX):  # the first is recorded
        pass
    assert directory.read_state()["last_activity"] > long_ago
    directory.update_state(last_activity=long_ago)
    for _ in range(3):  # within the interval: not written again
        with usage.using(SANDBOX):
            assert usage.in_use(SANDBOX)  # in use all the same
    assert directory.read_state()["last_activity"] == long_ago
    usage.record(SANDBOX)  # a plain record is always written
    assert directory.read_state()["last_activity"] > long_ago
    directory.update_state(last_activity=long_ago)
    time.sleep(0.3)
    with usage.using(SANDBOX):  # the interval has passed
        assert directory.read_state()["last_activity"] > long_ago
