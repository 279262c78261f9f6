"""The memory snapshot refusal says why, for each runtime, and offers what works."""

from __future__ import annotations

import pytest

from jupyter_sandbox.sandbox.snapshots.memory import memory_snapshot_refusal


@pytest.mark.parametrize(
    ("runtime", "reason"),
    [("runsc", "bound host sockets"), ("runc", "CRIU")],
)
def test_refusal_names_the_runtime_and_the_reason(runtime: str, reason: str) -> None:
    error = memory_snapshot_refusal("0123456789ab", runtime)
    assert error.code == "memory_snapshot_unsupported"
    assert error.http_status == 501
    assert reason in error.message
    assert "untouched" in error.message
    assert "Workspace snapshots" in error.message
