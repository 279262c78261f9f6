"""Turning the probe's raw output (and the engine's view) into named measurements.

The probe only reports what it read and where; deciding what that means (which kernel, which
capabilities, whether the root is read-only) happens here, on the host, so the interpretation can
change without touching the script that runs inside sandboxes.
"""

from __future__ import annotations

import json
from typing import Any

from jupyter_sandbox.sandbox.attestation.report import Measurement
from jupyter_sandbox.sandbox.backends.records import EngineStats

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


def cap_names(mask_hex: str) -> list[str]:
    mask = int(mask_hex, 16)
    return [
        CAPABILITIES[bit] if bit < len(CAPABILITIES) else f"cap_{bit}"
        for bit in range(64)
        if mask >> bit & 1
    ]


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
