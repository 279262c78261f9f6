"""Isolation attestation: the report's checks and summary (no engine), then real sandboxes."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest

from jupyter_sandbox.protocol.errors import OutputTooLargeError, SandboxNotFoundError
from jupyter_sandbox.sandbox import attestation
from jupyter_sandbox.sandbox.attestation import (
    AttestationReport,
    Expected,
    attest,
    build_report,
    cap_names,
    expected_from_state,
    request_engine_sample,
)
from jupyter_sandbox.sandbox.attestation.run import (
    BOOT_RESULT_MAX_BYTES,
    _parse_probe_output,
    probe_source,
    run_probe,
)
from jupyter_sandbox.sandbox.backends.base import ExecOptions
from jupyter_sandbox.sandbox.backends.records import EngineFacts, EngineStats
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.manager import SandboxManager

MIB = 1024**2
EXPECTED = Expected(
    runtime="runsc",
    uid=10001,
    gid=10001,
    read_only_root=True,
    memory_bytes=512 * MIB,
    pids=256,
    cpus=1.0,
    nofile=1024,
    tmp_bytes=256 * MIB,
    workspace_bytes=1024 * MIB,
)
FACTS = EngineFacts("20.10", frozenset({"runc", "runsc"}), "1", True, kernel_version="6.1.0-host")


def field(value: Any, source: str = "test") -> dict[str, Any]:
    return {"value": value, "source": source}


def fs(size: int, **extra: Any) -> dict[str, Any]:
    return {"fstype": "tmpfs", "size_bytes": size, "used_bytes": 0, "writable": True, **extra}


def gvisor_probe() -> dict[str, Any]:
    """What the probe printed in a runsc sandbox (trimmed), as measured on this project's host."""
    zero = "0000000000000000"
    return {
        "probe": 1,
        "fields": {
            "kernel": field(
                {
                    "release": "4.4.0",
                    "version": "#1 SMP Sun Jan 10 15:06:54 PST 2016",
                    "proc_version": "Linux version 4.4.0 #1 SMP Sun Jan 10 15:06:54 PST 2016",
                }
            ),
            "identity": field({"uid": 10001, "euid": 10001, "gid": 10001, "egid": 10001}),
            "capabilities": field({"CapInh": zero, "CapPrm": zero, "CapEff": zero, "CapBnd": zero}),
            "no_new_privs": field(1),
            "seccomp": field(0),
            "processes": field(
                [{"pid": 1, "name": "docker-init", "uids": [10001] * 4, "cap_eff": zero}]
            ),
            "root_fs": field(
                {
                    "read_only_flag": False,
                    "writable": False,
                    "errno": "EROFS",
                    "write_test_dir": "/var/tmp",
                    "options": "ro,ro,trans=fd",
                }
            ),
            "workspace_fs": field(fs(1024 * MIB)),
            "tmp_fs": field(fs(256 * MIB)),
            "interfaces": field(["lo"]),
            "egress": field(
                {"blocked": True, "attempts": {"tcp_ipv4 1.1.1.1:443": "EHOSTUNREACH"}}
            ),
            "memory_meminfo": field(512 * MIB),
            "rlimit_nproc": field({"soft": 256, "hard": 256}),
            "rlimit_nofile": field({"soft": 1024, "hard": 1024}),
            "cpu_visible": field({"affinity": [0, 1], "cpu_count": 2}),
        },
        "errors": {},
    }


def report(probe: dict[str, Any], expected: Expected = EXPECTED) -> AttestationReport:
    stats = EngineStats(None, None, None, None, None, 512 * MIB, 512 * MIB, None, 4096)
    return build_report(
        "0123456789ab", probe, expected, duration=0.3, engine_facts=FACTS, engine_stats=stats
    )


# -- unit: checks and summary -----------------------------------------------------------------


def test_a_sandbox_as_configured_is_ok() -> None:
    result = report(gvisor_probe())
    assert result.ok, result.findings
    assert result.summary() == (
        "attested: gVisor kernel, uid 10001, no capabilities, no_new_privs, read-only root, "
        "interfaces: lo, egress blocked, memory 512 MiB, pids 256"
    )
    assert "gVisor" in result.measured["kernel"].source
    assert any("CPU quota" in note for note in result.notes)  # unmeasured, and said so


def test_the_report_survives_json() -> None:
    result = report(gvisor_probe())
    again = AttestationReport.from_dict(json.loads(json.dumps(result.as_dict())))
    assert again.as_dict() == result.as_dict()
    assert again.ok
    assert result.as_dict()["ok"] is True


@pytest.mark.parametrize(
    ("change", "check"),
    [
        (lambda f: f["memory_meminfo"].update(value=2048 * MIB), "memory_bytes"),
        (lambda f: f["capabilities"]["value"].update(CapEff="0000000000000400"), "capabilities"),
        (lambda f: f["no_new_privs"].update(value=0), "no_new_privs"),
        (lambda f: f["root_fs"]["value"].update(writable=True, errno=None), "read_only_root"),
        (lambda f: f["interfaces"].update(value=["eth0", "lo"]), "interfaces"),
        (lambda f: f["egress"]["value"].update(blocked=False), "egress_blocked"),
        (lambda f: f["identity"]["value"].update(euid=0), "uid"),
        (lambda f: f["rlimit_nproc"].update(value={"soft": 100000, "hard": 100000}), "pids"),
        (lambda f: f.pop("interfaces"), "interfaces"),  # unmeasured is a finding too
    ],
)
def test_a_difference_is_a_loud_finding(change: Any, check: str) -> None:
    probe = gvisor_probe()
    change(probe["fields"])
    result = report(probe)
    assert not result.ok
    assert check in [f.check for f in result.findings]
    assert "ATTESTATION MISMATCH" in result.summary()


def test_a_host_kernel_under_runsc_is_a_finding() -> None:
    probe = gvisor_probe()
    probe["fields"]["kernel"]["value"].update(release="6.1.0-host", version="#1 SMP")
    result = report(probe)
    assert result.value("kernel") == "host"
    assert [f.message for f in result.findings if f.check == "kernel"] == [
        "kernel is host, expected gvisor"
    ]
    assert result.summary().startswith("attested: host kernel")


def test_a_failed_probe_is_reported_not_raised() -> None:
    result = report({"error": "the probe did not finish within 0.001s"})
    assert not result.ok
    assert not result.probe_ok
    assert result.summary().startswith("attestation FAILED, isolation not verified")
    assert AttestationReport.from_dict(result.as_dict()).ok is False


def test_capability_names() -> None:
    assert cap_names("0000000000000000") == []
    assert cap_names("0000000000200400") == ["net_bind_service", "sys_admin"]


def test_banner_line_without_a_report() -> None:
    assert attestation.banner_line({}) == "attestation: none recorded"
    stored = {"attestation": report(gvisor_probe()).as_dict()}
    assert attestation.banner_line(stored).startswith("attested: gVisor kernel")


# -- integration ------------------------------------------------------------------------------


def probe_script() -> dict[str, Any]:
    """The probe's script, run as the sandbox's Python runs it, short of its main()."""
    namespace: dict[str, Any] = {"__name__": "probe"}
    exec(compile(probe_source(), "attestation-probe", "exec"), namespace)
    return namespace


KERNEL_PROCESS = {
    "pid": 7,
    "name": "python",
    "command": "python -m ipykernel_launcher -f /run/sandbox/kernel.json",
    "uids": [10001] * 4,
    "cap_eff": "0000000000000000",
    "no_new_privs": 1,
}
# What an exec the engine is starting shows until it becomes its program.
EXEC_INIT = KERNEL_PROCESS | {"pid": 12, "name": "runc:[2:INIT]", "command": "runc init"}
EXEC_INIT |= {"uids": [0] * 4, "cap_eff": "000001ffffffffff"}  # root, every capability


def test_a_privileged_process_that_goes_at_once_is_not_a_finding() -> None:
    probe = probe_script()
    reads = iter([[KERNEL_PROCESS, EXEC_INIT], [KERNEL_PROCESS, EXEC_INIT], [KERNEL_PROCESS]])
    probe["visible_processes"] = lambda: next(reads)
    probe["probe_processes"]()
    assert probe["fields"]["processes"]["value"] == [KERNEL_PROCESS]


def test_a_privileged_process_that_stays_is_reported() -> None:
    probe = probe_script()
    probe["SETTLE_WAIT"] = 0.2
    reads = 0

    def visible() -> list[dict[str, Any]]:
        nonlocal reads
        reads += 1
        return [KERNEL_PROCESS, EXEC_INIT]

    probe["visible_processes"] = visible
    probe["probe_processes"]()
    assert probe["fields"]["processes"]["value"] == [KERNEL_PROCESS, EXEC_INIT]
    assert reads > 1  # it was given the time to go
    measured = gvisor_probe()
    measured["fields"]["processes"] = probe["fields"]["processes"]
    assert [finding.check for finding in report(measured).findings] == ["processes"]


@pytest.mark.integration
async def test_attestation_of_a_real_sandbox(
    manager: SandboxManager, runtime: str, purpose: str
) -> None:
    sandbox = await manager.create(
        "alice", runtime=runtime, purpose=purpose, limits={"memory": "512m", "cpus": 0.5}
    )
    sandbox_id = sandbox.sandbox_id
    stored = SandboxDirectory(manager.settings.state_path, sandbox_id).read_state()["attestation"]
    result = await manager.attestation("alice", sandbox_id)
    assert result.as_dict() == stored  # made at start, served from the state file
    assert result.ok, result.findings
    assert result.value("kernel") == ("gvisor" if runtime == "runsc" else "host")
    assert result.value("uid") == manager.settings.effective_uid == 10001
    assert result.value("capabilities") == []
    assert result.value("no_new_privs") is True
    assert result.value("read_only_root") is True
    assert result.value("interfaces") == ["lo"]
    assert result.value("egress_blocked") is True
    assert result.value("memory_bytes") == 512 * MIB
    # Half a core over a 500 ms window; gVisor shows no CPU cgroup inside, runc does.
    host_config = manager.backend.engine.client.api.inspect_container(  # type: ignore[attr-defined]
        f"jupyter-sandbox-{sandbox_id}"
    )["HostConfig"]
    assert (host_config["CpuPeriod"], host_config["CpuQuota"]) == (500_000, 250_000)
    assert result.value("cpus") == (None if runtime == "runsc" else 0.5)
    assert result.value("image_id").startswith("sha256:")
    assert "engine" in result.measured["image_id"].source
    assert result.summary().startswith(
        "attested: " + ("gVisor kernel" if runtime == "runsc" else "host kernel")
    )
    # Measured at boot by the sandbox's supervisor, with the kernel's process in view.
    assert result.probe["ran_by"] == "the sandbox's supervisor at boot"
    assert "no ipykernel process" not in result.measured["processes"].source
    assert result.value("processes")["privileged"] == []
    # Asked again, the host probes through docker exec and measures the same.
    again = await manager.attestation("alice", sandbox_id, refresh=True)
    assert again.probe["ran_by"] == "docker exec"
    assert again.ok, again.findings
    assert again.value("kernel") == result.value("kernel")

    expected = expected_from_state(
        manager, SandboxDirectory(manager.settings.state_path, sandbox_id).read_state()
    )
    # The engine's cgroup sample is taken when it has answered, and never waited for.
    answered = request_engine_sample(manager.backend, sandbox_id)
    await answered
    with_sample = await attest(manager.backend, sandbox_id, expected, engine_sample=answered)
    assert with_sample.value("host_cgroup")["memory_limit"] == 512 * MIB
    unanswered: asyncio.Future[EngineStats | None] = asyncio.get_running_loop().create_future()
    without = await attest(manager.backend, sandbox_id, expected, engine_sample=unanswered)
    assert "host_cgroup" not in without.measured
    assert any("no sample of it yet" in note for note in without.notes)
    assert without.ok, without.findings

    # A probe that cannot finish yields a failed report, and the sandbox lives on.
    failed = await attest(manager.backend, sandbox_id, expected, timeout=0.001)
    assert not failed.ok
    assert "did not finish" in str(failed.error)
    assert (await manager.get("alice", sandbox_id)).running

    with pytest.raises(SandboxNotFoundError):
        await manager.attestation("bob", sandbox_id)


@pytest.mark.integration
async def test_an_image_whose_supervisor_runs_no_probe_is_attested_through_exec(
    manager: SandboxManager, purpose: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As with an image built before the boot-time probe (or a custom supervisor): nothing in the
    # sandbox takes the probe the host leaves, so the host runs it through docker exec.
    monkeypatch.setattr(attestation.run, "BOOT_PROBE", "attestation-probe-unknown-to-the-image.py")
    sandbox = await manager.create("alice", runtime="runc", purpose=purpose)
    result = await manager.attestation("alice", sandbox.sandbox_id)
    assert result.probe["ran_by"] == "docker exec"
    assert result.ok, result.findings
    assert result.value("processes")["privileged"] == []


@pytest.mark.integration
async def test_a_probe_that_cannot_run_does_not_stop_the_start(
    manager: SandboxManager, purpose: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # At boot: a probe that fails inside the sandbox's supervisor.
    monkeypatch.setattr(attestation.run, "probe_source", lambda: b"raise OSError('no /proc')\n")
    sandbox = await manager.create("alice", runtime="runc", purpose=purpose)
    result = await manager.attestation("alice", sandbox.sandbox_id)
    assert not result.ok
    assert "OSError: no /proc" in str(result.error)
    assert result.summary().startswith("attestation FAILED")
    # Through docker exec: a probe that cannot start.
    monkeypatch.setattr(attestation.run, "PROBE_ARGV", ["no-such-python3", "-"])
    result = await manager.attestation("alice", sandbox.sandbox_id, refresh=True)
    assert not result.ok
    assert "exited with 126: 'no-such-python3' could not be started" in str(result.error)
    monkeypatch.undo()
    assert (await manager.attestation("alice", sandbox.sandbox_id, refresh=True)).ok


def test_expected_reads_the_configured_limits() -> None:
    class Settings:
        effective_uid = 10001
        read_only_root = True

    class Manager:
        settings = Settings()

    state = {
        "runtime": "runc",
        "limits": {
            "memory": 512 * MIB,
            "cpus": 1.0,
            "pids": 256,
            "nofile": 1024,
            "tmp_size": 256 * MIB,
            "workspace_size": 1024 * MIB,
        },
        "workspace": {"mode": "copy-on-write"},
    }
    expected = expected_from_state(Manager(), copy.deepcopy(state))  # type: ignore[arg-type]
    assert expected is not None
    assert (expected.kernel, expected.memory_bytes, expected.workspace_bytes) == (
        "host",
        512 * MIB,
        None,
    )
    assert expected_from_state(Manager(), {}) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("output", "why"),
    [
        # json.loads raised RecursionError, which left attest (it promises not to raise), and
        # took NaN as a float the report's JSON cannot carry.
        (b"[" * 60_000, "nested too deeply"),
        (b'{"fields": {"uid": NaN}}', "NaN is not a JSON number"),
        (b'{"fields": {"memory": 1e999}}', "too large"),
        (b'{"fields": {}, "fields": {"uid": 0}}', "names a key twice"),
    ],
)
def test_a_probe_output_the_host_cannot_read_strictly_is_an_error_entry(
    output: bytes, why: str
) -> None:
    parsed = _parse_probe_output(output)
    assert list(parsed) == ["error"]
    assert parsed["error"].startswith("the probe's output is not JSON")
    assert why in parsed["error"]


async def test_the_probe_s_output_is_read_no_further_than_a_result_is_taken() -> None:
    # The exec is bounded where the parser refuses (a boot result's bound), not at the default
    # bound of any exec, many times larger: the sandbox writes that output into host memory.
    asked: list[ExecOptions] = []

    class Backend:
        async def exec(self, sandbox_id: str, argv: list[str], options: ExecOptions) -> Any:
            asked.append(options)
            raise OutputTooLargeError(f"the command's output exceeds {options.max_output} bytes")

    result = await run_probe(Backend(), "s1", timeout=5)  # type: ignore[arg-type]
    assert [options.max_output for options in asked] == [BOOT_RESULT_MAX_BYTES]
    assert result == {"error": "the probe's output is too large"}
