"""The attestation report: measured values with their sources, findings, and the banner text.

Reports are stored as JSON in the sandbox's state file and served by the REST API, so every
dataclass here converts to and from plain dicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jupyter_sandbox.sandbox.attestation.expected import Expected
from jupyter_sandbox.sandbox.host.state_record import SandboxState


@dataclass(frozen=True)
class Measurement:
    """One measured value and how it was measured."""

    value: Any
    source: str


@dataclass(frozen=True)
class Finding:
    """A difference between what was measured and what was configured."""

    check: str
    expected: Any
    measured: Any
    message: str


@dataclass(frozen=True)
class AttestationReport:
    """The measured isolation of one sandbox, compared with its configuration.

    ``measured`` holds the interpreted facts (kernel, uid, capabilities...); ``probe`` the raw
    fields the probe reported, for anyone who wants to check the interpretation.
    """

    sandbox_id: str
    measured_at: str
    duration_seconds: float
    probe_ok: bool
    error: str | None
    measured: dict[str, Measurement]
    expected: Expected | None
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    probe: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True only when the probe ran and every checked value is as configured."""
        return self.probe_ok and not self.findings

    def value(self, name: str) -> Any:
        found = self.measured.get(name)
        return None if found is None else found.value

    def as_dict(self) -> dict[str, Any]:
        """JSON for the REST API and the state file."""
        return {
            "sandbox_id": self.sandbox_id,
            "measured_at": self.measured_at,
            "duration_seconds": self.duration_seconds,
            "ok": self.ok,
            "probe_ok": self.probe_ok,
            "error": self.error,
            "summary": self.summary(),
            "measured": {
                k: {"value": m.value, "source": m.source} for k, m in self.measured.items()
            },
            "expected": None if self.expected is None else self.expected.as_dict(),
            "findings": [
                {
                    "check": f.check,
                    "expected": f.expected,
                    "measured": f.measured,
                    "message": f.message,
                }
                for f in self.findings
            ],
            "notes": list(self.notes),
            "probe": self.probe,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AttestationReport:
        expected = data.get("expected")
        return cls(
            sandbox_id=str(data.get("sandbox_id", "")),
            measured_at=str(data.get("measured_at", "")),
            duration_seconds=float(data.get("duration_seconds", 0.0)),
            probe_ok=bool(data.get("probe_ok", False)),
            error=data.get("error"),
            measured={
                k: Measurement(m.get("value"), str(m.get("source", "")))
                for k, m in (data.get("measured") or {}).items()
            },
            expected=Expected.from_dict(expected) if isinstance(expected, dict) else None,
            findings=[
                Finding(
                    str(f.get("check", "")),
                    f.get("expected"),
                    f.get("measured"),
                    str(f.get("message", "")),
                )
                for f in data.get("findings") or []
            ],
            notes=[str(n) for n in data.get("notes") or []],
            probe=dict(data.get("probe") or {}),
        )

    def summary(self) -> str:
        """One or two short lines for the kernel banner: what was measured, and any mismatch."""
        if not self.probe_ok:
            return f"attestation FAILED, isolation not verified: {self.error}"
        parts = [_kernel_words(self.value("kernel"))]
        uid = self.value("uid")
        parts.append(f"uid {uid}" if uid is not None else "uid unmeasured")
        caps = self.value("capabilities")
        parts.append("no capabilities" if caps == [] else f"capabilities {','.join(caps or ['?'])}")
        if self.value("no_new_privs") is True:
            parts.append("no_new_privs")
        ro = self.value("read_only_root")
        parts.append({True: "read-only root", False: "WRITABLE root"}.get(ro, "root fs unmeasured"))
        interfaces = self.value("interfaces")
        parts.append(f"interfaces: {','.join(interfaces)}" if interfaces else "interfaces: none")
        egress = self.value("egress_blocked")
        parts.append(
            {True: "egress blocked", False: "EGRESS OPEN"}.get(egress, "egress unmeasured")
        )
        memory = self.value("memory_bytes")
        parts.append(f"memory {human_bytes(memory)}" if memory else "memory unmeasured")
        pids = self.value("pids")
        parts.append(f"pids {pids}" if pids else "pids unmeasured")
        line = "attested: " + ", ".join(parts)
        if self.findings:
            line += "\nATTESTATION MISMATCH: " + "; ".join(f.message for f in self.findings)
        return line


def human_bytes(num: int) -> str:
    if num >= 1024**3:
        return f"{num / 1024**3:.1f} GiB"
    return f"{num / 1024**2:.0f} MiB"


def _kernel_words(kernel: Any) -> str:
    return {"gvisor": "gVisor kernel", "host": "host kernel"}.get(str(kernel), f"kernel {kernel}")


def stored_report(state: SandboxState) -> AttestationReport | None:
    """The report kept in a sandbox's state, if any."""
    data = state.get("attestation")
    return AttestationReport.from_dict(data) if isinstance(data, dict) else None


def banner_line(state: SandboxState) -> str:
    """The attestation's summary for the kernel banner, from a sandbox's state."""
    report = stored_report(state)
    return "attestation: none recorded" if report is None else report.summary()
