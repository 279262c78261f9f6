"""Which sandboxes a memory snapshot is attempted on: each refusal says why and what to do.

A checkpoint that fails under runsc can stop the sandbox and lose its state, so these decisions
(taken before anything is touched) are the safety of the feature; the round trips themselves are
in test_memory_roundtrip.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from jupyter_sandbox.protocol.errors import SandboxConflictError
from jupyter_sandbox.protocol.snapshot_errors import MemorySnapshotUnsupportedError
from jupyter_sandbox.sandbox.backends.records import EngineFacts, SandboxInfo
from jupyter_sandbox.sandbox.snapshots.memory import check_checkpointable

FACTS = EngineFacts("20.10.24", frozenset({"runc", "runsc"}), "2", True, experimental=True)
READY: dict[str, Any] = {"owner": "alice", "bridged": True, "context": "c1"}


def info(runtime: str = "runsc", status: str = "running") -> SandboxInfo:
    return SandboxInfo(
        sandbox_id="0123456789ab",
        container_id="f" * 64,
        name="jupyter-sandbox-0123456789ab",
        owner="alice",
        runtime=runtime,
        image="jupyter-sandbox/python:0.1.0",
        status=status,
        labels={},
        host_dir="/tmp/x/0123456789ab",
        created="",
        exit_code=0 if status == "exited" else None,
    )


def check(
    sandbox: SandboxInfo | None = None,
    state: dict[str, Any] | None = None,
    facts: EngineFacts = FACTS,
    *,
    attached: bool = False,
    release: int | None = 20240729,
) -> None:
    check_checkpointable(
        sandbox or info(),
        READY if state is None else state,
        facts,
        attached=attached,
        runsc_release=release,
    )


def test_a_bridged_idle_runsc_sandbox_is_checkpointable() -> None:
    check()
    check(release=None)  # a remote engine's runsc: not known here, not refused


@pytest.mark.parametrize(
    ("case", "says", "code", "status"),
    [
        # What the caller chose for the sandbox: a conflict with it (409), not the server's lack.
        ({"sandbox": info(runtime="runc")}, "CRIU", "memory_snapshot_refused", 409),
        (
            {"state": {"owner": "alice"}},
            "c.SandboxSettings.memory_snapshots = True",
            "memory_snapshot_refused",
            409,
        ),
        (
            {"state": {**READY, "network_token": "x"}},
            "network policy was always 'none'",
            "memory_snapshot_refused",
            409,
        ),
        # What the server's engine lacks: 501.
        (
            {"facts": EngineFacts("20.10.24", frozenset(), "2", True)},
            '"experimental": true',
            "memory_snapshot_unsupported",
            501,
        ),
        ({"release": 20221219}, "bookworm-backports", "memory_snapshot_unsupported", 501),
    ],
)
def test_what_cannot_work_is_refused_with_the_fix(
    case: dict[str, Any], says: str, code: str, status: int
) -> None:
    with pytest.raises(MemorySnapshotUnsupportedError) as refused:
        check(**case)
    assert refused.value.code == code
    assert refused.value.http_status == status
    assert says in refused.value.message
    assert "Workspace snapshots" in refused.value.message  # what works instead


@pytest.mark.parametrize(
    ("case", "says"),
    [
        ({"attached": True}, "shut that kernel down first"),
        ({"state": {**READY, "checkpointed": "00112233aabbccdd"}}, "restore it first"),
        ({"sandbox": info(status="exited")}, "exited with code 0"),
    ],
)
def test_what_could_work_later_is_a_conflict(case: dict[str, Any], says: str) -> None:
    with pytest.raises(SandboxConflictError) as refused:
        check(**case)
    assert refused.value.http_status == 409
    assert says in refused.value.message
