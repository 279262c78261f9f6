"""Comparing the measurements with the configuration, and the report that results.

Every difference is a :class:`Finding`; a value that could not be measured is one too (unless
marked optional), so a probe that sees less never makes a sandbox look better isolated.
"""

from __future__ import annotations

from typing import Any

from jupyter_sandbox.sandbox.attestation.expected import Expected
from jupyter_sandbox.sandbox.attestation.interpret import interpret
from jupyter_sandbox.sandbox.attestation.report import (
    AttestationReport,
    Finding,
    Measurement,
    human_bytes,
)
from jupyter_sandbox.sandbox.backends.records import EngineFacts, EngineStats, SandboxInfo
from jupyter_sandbox.sandbox.host.clock import now_iso


def check(measured: dict[str, Measurement], expected: Expected) -> list[Finding]:
    """Every way the measurements differ from the configuration (missing ones included)."""
    findings: list[Finding] = []

    def value(name: str) -> Any:
        found = measured.get(name)
        return None if found is None else found.value

    def expect(name: str, want: Any, label: str, *, required: bool = True) -> None:
        got = value(name)
        if got is None:
            if required:
                findings.append(Finding(name, want, None, f"{label} could not be measured"))
        elif got != want:
            findings.append(
                Finding(name, want, got, f"{label} is {_show(got)}, expected {_show(want)}")
            )

    expect("kernel", expected.kernel, "kernel")
    expect("uid", expected.uid, "uid")
    expect("gid", expected.gid, "gid")
    expect("capabilities", sorted(c.lower() for c in expected.capabilities), "capabilities")
    expect("no_new_privs", True, "no_new_privs")
    expect("read_only_root", expected.read_only_root, "read-only root")
    if expected.network == "none":
        expect("interfaces", ["lo"], "network interfaces")
    expect("egress_blocked", True, "direct egress blocked")
    expect("memory_bytes", expected.memory_bytes, "memory limit")
    # Under runsc the host pids cgroup bounds gVisor's own threads; RLIMIT_NPROC bounds the code.
    expect("pids", expected.pids, "pids limit")
    expect("nofile", expected.nofile, "open-file limit")
    expect("cpus", expected.cpus, "CPU quota", required=False)
    if expected.runtime == "runc":
        expect("seccomp", 2, "seccomp mode")
    processes = value("processes")
    if isinstance(processes, dict) and processes.get("privileged"):
        names = ", ".join(f"{p.get('name')}[{p.get('pid')}]" for p in processes["privileged"])
        findings.append(
            Finding("processes", [], processes["privileged"], f"privileged processes: {names}")
        )
    for name, want in (("workspace_fs", expected.workspace_bytes), ("tmp_fs", expected.tmp_bytes)):
        fs = value(name)
        if want is not None and isinstance(fs, dict) and fs.get("size_bytes") != want:
            label = name.removesuffix("_fs")
            findings.append(
                Finding(
                    name,
                    want,
                    fs.get("size_bytes"),
                    f"/{label} size is {_show(fs.get('size_bytes'))}, expected {_show(want)}",
                )
            )
    host = value("host_cgroup")
    if isinstance(host, dict):
        if host.get("memory_limit") not in (None, expected.memory_bytes):
            findings.append(
                Finding(
                    "host_cgroup",
                    expected.memory_bytes,
                    host["memory_limit"],
                    f"host cgroup memory limit is {_show(host['memory_limit'])}, expected {_show(expected.memory_bytes)}",
                )
            )
        if host.get("memory_swap_limit") not in (None, expected.memory_bytes):
            findings.append(
                Finding(
                    "host_cgroup",
                    expected.memory_bytes,
                    host["memory_swap_limit"],
                    f"swap allowed: memory+swap limit {_show(host['memory_swap_limit'])}, expected {_show(expected.memory_bytes)}",
                )
            )
    return findings


def _show(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1024**2:
        return str(value)
    return human_bytes(value)


def build_report(
    sandbox_id: str,
    probe: dict[str, Any],
    expected: Expected | None,
    *,
    duration: float,
    engine_facts: EngineFacts | None = None,
    info: SandboxInfo | None = None,
    engine_stats: EngineStats | None = None,
) -> AttestationReport:
    """A report from the probe's output (``{}`` or with ``error`` set when it failed)."""
    error = probe.get("error")
    measured, notes = interpret(
        probe,
        engine_kernel=engine_facts.kernel_version if engine_facts else "",
        image_id=info.image_id if info else "",
        engine_stats=engine_stats,
    )
    findings: list[Finding] = []
    if error:
        findings.append(Finding("probe", "ran", "failed", f"isolation not verified: {error}"))
    elif expected is None:
        findings.append(
            Finding("expected", "configured limits", None, "no configuration to compare with")
        )
    else:
        findings = check(measured, expected)
    report = AttestationReport(
        sandbox_id=sandbox_id,
        measured_at=now_iso(),
        duration_seconds=round(duration, 3),
        probe_ok=not error,
        error=error,
        measured=measured,
        expected=expected,
        findings=findings,
        notes=notes,
        probe={k: v for k, v in probe.items() if k != "error"},
    )
    return report
