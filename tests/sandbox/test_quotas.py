"""Per-owner quotas, summed from the state files (no engine needed)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from jupyter_sandbox.sandbox.errors import QuotaExceededError
from jupyter_sandbox.sandbox.hostdir import write_json_atomic
from jupyter_sandbox.sandbox.quotas import SandboxQuotas, Usage, usage_of


def reserve(
    state_dir: Path, sandbox_id: str, owner: str, memory: int, cpus: float, **extra: object
) -> None:
    (state_dir / sandbox_id).mkdir()
    state = {"owner": owner, "limits": {"memory": memory, "cpus": cpus}, **extra}
    write_json_atomic(state_dir / sandbox_id / "state.json", state)


def test_usage_counts_the_owners_sandboxes_and_claimed_pool_members(tmp_path: Path) -> None:
    reserve(tmp_path, "000000000001", "alice", 2**30, 1.0)
    reserve(
        tmp_path, "000000000002", "alice", 2**29, 0.5, pool="k", claimed="2026-11-30T00:00:00+00:00"
    )
    reserve(tmp_path, "000000000003", "alice", 2**30, 1.0, pool="k")  # waiting: nobody's yet
    reserve(tmp_path, "000000000004", "bob", 2**30, 1.0)
    # Whatever else lives in the state directory is not a sandbox.
    (tmp_path / "locks").mkdir()
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(tmp_path / "zygote.sock"))
        assert usage_of(tmp_path, "alice") == Usage(2, 2**30 + 2**29, 1.5)


@pytest.mark.parametrize(
    ("usage", "quota"),
    [
        (Usage(3, 0, 0.0), "max_sandboxes"),
        (Usage(1, 5 * 2**30, 0.0), "max_memory"),
        (Usage(1, 0, 2.5), "max_cpus"),
    ],
)
def test_each_quota_is_named_when_exceeded(usage: Usage, quota: str) -> None:
    quotas = SandboxQuotas(max_sandboxes=2, max_memory="4g", max_cpus=2.0)
    with pytest.raises(QuotaExceededError, match=quota):
        quotas.check(usage)
    quotas.check(Usage(2, 4 * 2**30, 2.0))  # at the limit is allowed


def test_zero_means_no_limit() -> None:
    SandboxQuotas(max_sandboxes=0, max_memory="", max_cpus=0.0).check(Usage(999, 2**50, 999.0))
