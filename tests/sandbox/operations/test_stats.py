"""Live resource use of a real sandbox, on both runtimes."""

from __future__ import annotations

import json

import pytest

from jupyter_sandbox.protocol.errors import SandboxNotFoundError
from jupyter_sandbox.sandbox.backends.base import ExecOptions
from jupyter_sandbox.sandbox.backends.records import EngineStats
from jupyter_sandbox.sandbox.manager import Sandbox, SandboxManager
from jupyter_sandbox.sandbox.operations.stats import cpu_percent, inside_report

MIB = 1024**2


def test_cpu_percent_from_two_samples() -> None:
    first = EngineStats(1_000_000_000, 10_000_000_000, 2, None, None, None, None, None, None)
    # 0.5 s of CPU while the host counted 2 s over 2 CPUs (1 s elapsed): half a core.
    second = EngineStats(1_500_000_000, 12_000_000_000, 2, None, None, None, None, None, None)
    assert cpu_percent(first, second, wall=1.0) == 50.0


@pytest.mark.integration
async def test_stats_of_a_real_sandbox(manager: SandboxManager, sandbox: Sandbox) -> None:
    sandbox_id = sandbox.sandbox_id
    before = await manager.stats("alice", sandbox_id)
    assert before.memory_bytes is not None
    assert before.memory_limit_bytes is not None
    assert 0 < before.memory_bytes <= before.memory_limit_bytes
    assert before.memory_limit_bytes == sandbox.limits.memory_bytes
    assert before.pids is not None
    assert before.pids >= 1
    assert before.cpu_seconds is not None
    assert before.cpu_seconds > 0
    assert before.workspace_bytes is not None

    write = "open('/workspace/five-mb', 'wb').write(b'x' * 5 * 2**20)"
    result = await manager.exec(
        "alice", sandbox_id, ["python3", "-c", write], ExecOptions(timeout=30)
    )
    assert result.exit_code == 0, result.stderr
    after = await manager.stats("alice", sandbox_id)
    assert after.workspace_bytes is not None
    assert after.workspace_bytes - before.workspace_bytes >= 5 * MIB
    assert after.cpu_percent is not None  # from the previous call's sample
    assert after.as_dict()["sandbox_id"] == sandbox_id

    with pytest.raises(SandboxNotFoundError):
        await manager.stats("bob", sandbox_id)


INSIDE = {
    "workspace_fstype": "tmpfs",
    "workspace_bytes": 4096,
    "workspace_complete": True,
    "processes": 2,
    "meminfo": {"MemTotal": 2 * MIB, "MemAvailable": MIB},
}


def test_the_inside_measurement_is_read_as_the_script_prints_it() -> None:
    assert inside_report(json.dumps(INSIDE).encode()) == INSIDE
    no_workspace = {"workspace_fstype": None, "processes": 0, "meminfo": {}}
    assert inside_report(json.dumps(no_workspace).encode()) == no_workspace


@pytest.mark.parametrize(
    ("printed", "why"),
    [
        # json.loads raised RecursionError (a 500 from GET .../stats) and took Infinity and
        # 1e999 as floats, which the answer's JSON cannot carry.
        (b"[" * 60_000, "nested too deeply"),
        (b'{"processes": Infinity}', "Infinity is not"),
        (json.dumps(INSIDE).replace("4096", "1e999").encode(), "too large"),
        (b" " * (64 * 1024 + 1), "more than"),
        (b"[1]", "not an object"),
        # The sandbox's code must not write the host's notes or counts of other types.
        (b'{"error": "all is well"}', "other keys"),
        (json.dumps({**INSIDE, "extra": 1}).encode(), "other keys"),
        # The fuzzer's find: the note listed the keys whole, of any length.
        (json.dumps({**INSIDE, "k" * 10_000: 1}).encode(), "other keys"),
        (json.dumps({**INSIDE, "processes": "2"}).encode(), "wrong type"),
        (json.dumps({**INSIDE, "processes": True}).encode(), "wrong type"),
        (json.dumps({**INSIDE, "processes": -1}).encode(), "wrong type"),
        (json.dumps({**INSIDE, "workspace_bytes": 2**64}).encode(), "wrong type"),
        (json.dumps({**INSIDE, "workspace_bytes": 1.5}).encode(), "wrong type"),
        (json.dumps({**INSIDE, "workspace_complete": 1}).encode(), "wrong type"),
        (json.dumps({**INSIDE, "meminfo": [["MemTotal", 1]]}).encode(), "wrong type"),
        (json.dumps({**INSIDE, "meminfo": {"Swap": 1}}).encode(), "wrong type"),
        (json.dumps({**INSIDE, "workspace_fstype": 7}).encode(), "wrong type"),
    ],
)
def test_a_measurement_other_than_the_scripts_is_a_note_not_a_crash(
    printed: bytes, why: str
) -> None:
    report = inside_report(printed)
    assert list(report) == ["error"]
    assert why in report["error"]
    assert len(report["error"]) < 300
