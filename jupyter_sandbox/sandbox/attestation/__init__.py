"""Isolation attestation: what a sandbox's isolation *is*, measured from inside it.

At start (and on request) a stdlib-only probe (probe.py) is piped into
``python3 -I -`` inside the sandbox, as the sandbox's own user with the container's security
settings, and reports what it sees: kernel, uid/gid, capabilities, no_new_privs, seccomp,
mounts, network interfaces, an egress attempt, limits. The engine adds what only it can see (the
image id, the host cgroup's limits). :class:`AttestationReport` holds every value with how it was
measured, and compares it with what the sandbox was configured to be: any difference is a
finding and makes the report not ``ok``. A probe that fails yields a report saying so, never an
exception: an unverified sandbox is reported as unverified, not as isolated.

Nothing here is taken from the configuration and presented as measured: a value the probe could
not measure is ``None`` with the reason in ``notes`` (e.g. the CPU quota under gVisor, whose
sandbox shows no cgroup files).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..backend import EngineFacts, EngineStats, SandboxBackend, SandboxInfo
from ..container_spec import now_iso
from ..errors import SandboxError
from ..hostdir import SandboxDirectory

if TYPE_CHECKING:
    from ..manager import SandboxManager

log = logging.getLogger(__name__)

PROBE_ARGV = ["python3", "-I", "-"]
# Seconds the probe may take inside the sandbox (measured: ~0.15 s under runc, ~0.3 s under
# runsc on an idle 2-core host; the egress attempts fail at once when there is no route).
PROBE_TIMEOUT = 10.0
# The kernel gVisor (runsc 2022-2024 releases) shows its sandboxes: a fixed, made-up identity.
GVISOR_RELEASE = "4.4.0"
GVISOR_VERSION = "#1 SMP Sun Jan 10 15:06:54 PST 2016"
ENGINE_SOURCE = "measured by the engine, not from inside the sandbox"
# Capability numbers to names (linux/capability.h), for findings a person can read.
CAPABILITIES = [
    "chown",
    "dac_override",
    "dac_read_search",
    "fowner",
    "fsetid",
    "kill",
    "setgid",
    "setuid",
    "setpcap",
    "linux_immutable",
    "net_bind_service",
    "net_broadcast",
    "net_admin",
    "net_raw",
    "ipc_lock",
    "ipc_owner",
    "sys_module",
    "sys_rawio",
    "sys_chroot",
    "sys_ptrace",
    "sys_pacct",
    "sys_admin",
    "sys_boot",
    "sys_nice",
    "sys_resource",
    "sys_time",
    "sys_tty_config",
    "mknod",
    "lease",
    "audit_write",
    "audit_control",
    "setfcap",
    "mac_override",
    "mac_admin",
    "syslog",
    "wake_alarm",
    "block_suspend",
    "audit_read",
    "perfmon",
    "bpf",
    "checkpoint_restore",
]


@functools.lru_cache(maxsize=1)
def probe_source() -> bytes:
    """The probe script's text, as piped into the sandbox's Python."""
    return Path(__file__).with_name("probe.py").read_bytes()


# -- what the sandbox should be ---------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    """What the sandbox was configured to be: the yardstick for the measurements."""

    runtime: str  # "runsc" | "runc"
    uid: int
    gid: int
    read_only_root: bool
    memory_bytes: int
    pids: int
    cpus: float
    nofile: int
    tmp_bytes: int
    workspace_bytes: int | None  # None: /workspace is not a size-capped tmpfs
    capabilities: tuple[str, ...] = ()
    network: str = "none"

    @property
    def kernel(self) -> str:
        return "gvisor" if self.runtime == "runsc" else "host"

    def as_dict(self) -> dict[str, Any]:
        return {
            "runtime": self.runtime,
            "kernel": self.kernel,
            "uid": self.uid,
            "gid": self.gid,
            "read_only_root": self.read_only_root,
            "memory_bytes": self.memory_bytes,
            "pids": self.pids,
            "cpus": self.cpus,
            "nofile": self.nofile,
            "tmp_bytes": self.tmp_bytes,
            "workspace_bytes": self.workspace_bytes,
            "capabilities": list(self.capabilities),
            "network": self.network,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Expected:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["capabilities"] = tuple(known.get("capabilities") or ())
        return cls(**known)


def expected_from_state(manager: SandboxManager, state: dict[str, Any]) -> Expected | None:
    """The configured policy of a sandbox, from its state file and the manager's settings."""
    from ..limits import SandboxLimits

    try:
        limits = SandboxLimits.parse(**state["limits"])
    except (KeyError, TypeError, SandboxError):
        return None
    uid = manager.settings.effective_uid
    tmpfs_workspace = (state.get("workspace") or {}).get("mode", "none") == "none"
    return Expected(
        runtime=str(state.get("runtime", "")),
        uid=uid,
        gid=uid,
        read_only_root=bool(manager.settings.read_only_root),
        memory_bytes=limits.memory_bytes,
        pids=limits.pids,
        cpus=limits.cpus,
        nofile=limits.nofile,
        tmp_bytes=limits.tmp_bytes,
        workspace_bytes=limits.workspace_bytes if tmpfs_workspace else None,
    )


# -- the report -------------------------------------------------------------------------------


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


def cap_names(mask_hex: str) -> list[str]:
    mask = int(mask_hex, 16)
    return [
        CAPABILITIES[bit] if bit < len(CAPABILITIES) else f"cap_{bit}"
        for bit in range(64)
        if mask >> bit & 1
    ]


# -- interpreting the probe --------------------------------------------------------------------


def interpret(
    probe: dict[str, Any],
    *,
    engine_kernel: str = "",
    image_id: str = "",
    engine_stats: EngineStats | None = None,
) -> tuple[dict[str, Measurement], list[str]]:
    """Facts from the probe's raw fields and the engine's view; plus notes on what is unmeasured."""
    fields = probe.get("fields") or {}
    out: dict[str, Measurement] = {}
    notes: list[str] = [f"probe error in {k}: {v}" for k, v in (probe.get("errors") or {}).items()]

    def raw(name: str) -> tuple[Any, str]:
        entry = fields.get(name) or {}
        return entry.get("value"), str(entry.get("source", ""))

    kernel, source = raw("kernel")
    if isinstance(kernel, dict):
        release, version = kernel.get("release", ""), kernel.get("version", "")
        if release == GVISOR_RELEASE and version == GVISOR_VERSION:
            verdict = "gvisor"
            how = f"gVisor's own kernel identity ({release} {version})"
        elif engine_kernel and release == engine_kernel:
            verdict = "host"
            how = f"release {release} equals the engine host's kernel (docker info)"
        else:
            verdict = f"unknown ({release})"
            how = f"release {release}: neither gVisor's nor the engine host's ({engine_kernel})"
        out["kernel"] = Measurement(verdict, f"{source}: {how}")

    identity, source = raw("identity")
    if isinstance(identity, dict):
        out["uid"] = Measurement(identity.get("euid"), source)
        out["gid"] = Measurement(identity.get("egid"), source)
        out["groups"] = Measurement(identity.get("groups"), source)

    caps, source = raw("capabilities")
    if isinstance(caps, dict) and "CapEff" in caps:
        held = sorted(
            {
                name
                for key in ("CapEff", "CapPrm", "CapBnd", "CapAmb")
                if key in caps
                for name in cap_names(caps[key])
            }
        )
        out["capabilities"] = Measurement(
            held, f"{source}: union of effective, permitted, bounding, ambient"
        )

    nnp, source = raw("no_new_privs")
    if nnp is not None:
        out["no_new_privs"] = Measurement(nnp == 1, source)
    seccomp, source = raw("seccomp")
    if seccomp is not None:
        out["seccomp"] = Measurement(seccomp, source)

    processes, source = raw("processes")
    if isinstance(processes, list):
        privileged = [
            p for p in processes if 0 in (p.get("uids") or []) or int(p.get("cap_eff") or "0", 16)
        ]
        out["processes"] = Measurement(
            {"count": len(processes), "privileged": privileged},
            f"{source}: those running as root or holding capabilities",
        )

    root, source = raw("root_fs")
    if isinstance(root, dict):
        mount_ro = "ro" in str(root.get("options", "")).split(",")
        decisive = root.get("write_test_dir") not in (None, "/")
        if root.get("writable"):
            ro: bool | None = False
        elif root.get("read_only_flag") or mount_ro or root.get("errno") == "EROFS":
            ro = True
        else:
            ro = None
        how = (
            f"mount flags ({'ro' if mount_ro else 'rw'}), statvfs ST_RDONLY "
            f"({root.get('read_only_flag')}), create in {root.get('write_test_dir') or '/'}: "
            f"{'created' if root.get('writable') else root.get('errno')}"
            + ("" if decisive else " (permission-denied only: not decisive)")
        )
        out["read_only_root"] = Measurement(ro, how)

    for name, key in (("workspace", "workspace_fs"), ("tmp", "tmp_fs")):
        fs, source = raw(key)
        if isinstance(fs, dict):
            out[f"{name}_fs"] = Measurement(
                {
                    k: fs.get(k)
                    for k in ("fstype", "size_bytes", "used_bytes", "writable", "options")
                },
                source,
            )

    interfaces, source = raw("interfaces")
    if isinstance(interfaces, list):
        out["interfaces"] = Measurement(interfaces, source)
    egress, source = raw("egress")
    if isinstance(egress, dict):
        out["egress_blocked"] = Measurement(
            egress.get("blocked"), f"{source}: {json.dumps(egress.get('attempts'))}"
        )

    memory, source = raw("memory_cgroup")
    if memory is not None:
        out["memory_bytes"] = Measurement(memory, source)
    elif str(out.get("kernel", Measurement("", "")).value) == "gvisor":
        meminfo, source = raw("memory_meminfo")
        if meminfo is not None:
            out["memory_bytes"] = Measurement(meminfo, f"{source} (gVisor sizes it to the limit)")
    if "memory_bytes" not in out:
        notes.append("memory limit: no cgroup file visible inside the sandbox")
    swap, source = raw("memory_swap_cgroup")
    if swap is not None:
        out["memory_swap_bytes"] = Measurement(swap, f"{source} (memory + swap)")

    pid_limits = []
    cgroup_pids, source = raw("pids_cgroup")
    if cgroup_pids is not None:
        pid_limits.append((cgroup_pids, source))
    nproc, source = raw("rlimit_nproc")
    if isinstance(nproc, dict) and nproc.get("soft") is not None:
        pid_limits.append((nproc["soft"], source + " soft"))
    if pid_limits:
        lowest = min(pid_limits)
        out["pids"] = Measurement(
            lowest[0], f"{lowest[1]} (the lowest of: {', '.join(s for _, s in pid_limits)})"
        )
    nofile, source = raw("rlimit_nofile")
    if isinstance(nofile, dict):
        out["nofile"] = Measurement(nofile.get("soft"), source + " soft")

    cpus, source = raw("cpu_cgroup")
    if cpus is not None:
        out["cpus"] = Measurement(cpus, source)
    else:
        visible, _ = raw("cpu_visible")
        notes.append(
            "CPU quota: no cgroup file visible inside the sandbox (gVisor shows none); the "
            f"sandbox sees {visible.get('cpu_count') if isinstance(visible, dict) else '?'} CPUs"
        )

    if image_id:
        out["image_id"] = Measurement(image_id, f"container inspect .Image: {ENGINE_SOURCE}")
    if engine_stats is not None:
        source = f"host cgroup via the engine's stats: {ENGINE_SOURCE}"
        out["host_cgroup"] = Measurement(
            {
                "memory_limit": engine_stats.memory_limit,
                "memory_swap_limit": engine_stats.memory_swap_limit,
                "pids_limit": engine_stats.pids_limit,
            },
            source,
        )
    return out, notes


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


# -- running it --------------------------------------------------------------------------------


async def run_probe(backend: SandboxBackend, sandbox_id: str, timeout: float) -> dict[str, Any]:
    """The probe's JSON output, or ``{"error": ...}`` saying why there is none."""
    try:
        result = await asyncio.wait_for(
            backend.exec(sandbox_id, PROBE_ARGV, timeout=timeout, stdin=probe_source()),
            timeout + 5,
        )
    except asyncio.TimeoutError:
        return {"error": f"the probe did not finish within {timeout:g}s"}
    except SandboxError as exc:
        return {"error": f"the probe could not run: {exc.message}"}
    except Exception as exc:  # an unverified sandbox is reported, never fatal
        log.exception("probe of sandbox %s failed", sandbox_id)
        return {"error": f"the probe could not run: {type(exc).__name__}: {exc}"}
    if result.timed_out:
        return {"error": f"the probe did not finish within {timeout:g}s"}
    if result.exit_code != 0:
        detail = result.stderr.decode(errors="replace").strip()[-300:]
        return {"error": f"the probe exited with {result.exit_code}: {detail or 'no message'}"}
    try:
        data = json.loads(result.stdout)
    except ValueError:
        return {"error": "the probe's output is not JSON"}
    if not isinstance(data, dict) or not isinstance(data.get("fields"), dict):
        return {"error": "the probe's output has no fields"}
    data.pop("error", None)
    return data


async def attest(
    backend: SandboxBackend,
    sandbox_id: str,
    expected: Expected | None,
    *,
    timeout: float = PROBE_TIMEOUT,
) -> AttestationReport:
    """Probe one running sandbox and compare with ``expected``. Never raises SandboxError."""
    start = time.monotonic()

    async def quietly(call: Any) -> Any:
        try:
            return await call
        except Exception as exc:
            log.warning("attestation of sandbox %s: %s", sandbox_id, exc)
            return None

    probe, facts, info, stats = await asyncio.gather(
        run_probe(backend, sandbox_id, timeout),
        quietly(backend.engine_facts()),
        quietly(backend.inspect(sandbox_id)),
        quietly(backend.stats(sandbox_id)),
    )
    return build_report(
        sandbox_id,
        probe,
        expected,
        duration=time.monotonic() - start,
        engine_facts=facts,
        info=info,
        engine_stats=stats,
    )


async def record_attestation(
    manager: SandboxManager, sandbox_id: str, *, timeout: float = PROBE_TIMEOUT
) -> AttestationReport:
    """Attest a sandbox of ``manager`` and store the report in its state file."""
    directory = SandboxDirectory(manager.settings.state_path, sandbox_id)
    expected = expected_from_state(manager, directory.read_state())
    report = await attest(manager.backend, sandbox_id, expected, timeout=timeout)
    try:
        manager.update_state(sandbox_id, attestation=report.as_dict())
    except OSError as exc:
        log.warning("cannot store the attestation of sandbox %s: %s", sandbox_id, exc)
    if report.ok:
        log.info("sandbox %s %s (%.2fs)", sandbox_id, report.summary(), report.duration_seconds)
    else:
        log.warning("sandbox %s: %s", sandbox_id, report.summary())
    return report


def stored_report(state: dict[str, Any]) -> AttestationReport | None:
    """The report kept in a sandbox's state, if any."""
    data = state.get("attestation")
    return AttestationReport.from_dict(data) if isinstance(data, dict) else None


def banner_line(state: dict[str, Any]) -> str:
    """The attestation's summary for the kernel banner, from a sandbox's state."""
    report = stored_report(state)
    return "attestation: none recorded" if report is None else report.summary()
