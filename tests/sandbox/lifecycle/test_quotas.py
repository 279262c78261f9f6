"""Per-owner quotas, summed from the state files (no engine needed)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from jupyter_sandbox.protocol.errors import QuotaExceededError
from jupyter_sandbox.sandbox.host.sandbox_dir import write_json_atomic
from jupyter_sandbox.sandbox.lifecycle.quotas import SandboxQuotas, Usage, usage_of
from jupyter_sandbox.sandbox.limits import SandboxLimits


def reserve(
    state_dir: Path,
    sandbox_id: str,
    owner: str,
    memory: int,
    cpus: float,
    limits: dict[str, int] | None = None,
    **extra: object,
) -> None:
    (state_dir / sandbox_id).mkdir()
    state = {"owner": owner, "limits": {"memory": memory, "cpus": cpus, **(limits or {})}, **extra}
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
        (Usage(1, 0, 0.0, pids=1025), "max_pids"),
        (Usage(1, 0, 0.0, tmp_bytes=2**30 + 1), "max_tmp_size"),
        (Usage(1, 0, 0.0, workspace_bytes=3 * 2**30), "max_workspace_size"),
    ],
)
def test_each_quota_is_named_when_exceeded(usage: Usage, quota: str) -> None:
    quotas = SandboxQuotas(
        max_sandboxes=2,
        max_memory="4g",
        max_cpus=2.0,
        max_pids=1024,
        max_tmp_size="1g",
        max_workspace_size="2g",
    )
    with pytest.raises(QuotaExceededError, match=f"quota {quota}:"):
        quotas.check(usage)
    quotas.check(Usage(2, 4 * 2**30, 2.0, 1024, 2**30, 2 * 2**30))  # at the limit is allowed


def test_pids_and_the_memory_backed_filesystems_count_in_the_quota(tmp_path: Path) -> None:
    """Issue 31: pids were not counted, so one owner could hold any number of the host's."""
    held = {"pids": 4096, "tmp_size": 2**28, "workspace_size": 2**30}
    reserve(tmp_path, "000000000001", "alice", 2**30, 1.0, held)
    reserve(tmp_path, "000000000002", "alice", 2**30, 1.0, held)
    reserve(tmp_path, "000000000003", "bob", 2**30, 1.0, held)
    usage = usage_of(tmp_path, "alice")
    assert (usage.pids, usage.tmp_bytes, usage.workspace_bytes) == (8192, 2**29, 2**31)
    limits = SandboxLimits.parse(
        memory="1g", cpus=1, pids=256, nofile=1024, tmp_size="256m", workspace_size="1g"
    )
    more = usage.plus(limits)
    assert (more.pids, more.tmp_bytes, more.workspace_bytes) == (8448, 2**29 + 2**28, 2**31 + 2**30)
    with pytest.raises(QuotaExceededError, match="quota max_pids: your sandboxes may hold 4096"):
        SandboxQuotas().check(more)  # the default quota


def test_zero_means_no_limit() -> None:
    SandboxQuotas(
        max_sandboxes=0,
        max_memory="",
        max_cpus=0.0,
        max_pids=0,
        max_tmp_size="",
        max_workspace_size="",
    ).check(Usage(999, 2**50, 999.0, 2**40, 2**50, 2**50))
