"""Measures a sandbox's isolation from inside it and prints one JSON object to stdout.

Not imported by the package: run.py pipes the probe's text into ``python3 -I -`` in the
sandbox, so it works with any image that has Python 3.7 or later (no image changes). Standard
library only, every measurement guarded, nothing written outside temporary files it removes, and
no network traffic except the egress probe (one TCP connect to a public anycast address per
address family and one DNS lookup, each with a short time limit).

The probe is one script in two parts, which run.py's ``probe_source`` joins: probe_boundaries.py
(where the results are recorded, and the filesystems, network and limits that confine the
sandbox), then this file, which measures the probe's own process (kernel, identity, privileges,
the processes it can see), runs every measurement and prints the results.

Output: ``{"probe": 1, "fields": {name: {"value": ..., "source": "..."}}, "errors": {...}}``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # defined in the same script when it runs (probe_boundaries.py, joined first)
    from jupyter_sandbox.sandbox.attestation.probe_boundaries import (
        errors,
        fields,
        probe_egress,
        probe_filesystems,
        probe_limits,
        probe_network,
        read,
        record,
    )

PROBE_VERSION = 1
# Seconds to wait for the kernel's process, which the sandbox's supervisor starts at boot.
KERNEL_WAIT = 5.0
# Seconds a privileged process seen is given to go or become unprivileged before it is
# reported: an exec the engine is starting shows as uid 0 with every capability until it
# becomes its program (runc's init), and the server's own short execs as uid 0 (gVisor's
# placing of a command's supervisor) come and go.
SETTLE_WAIT = 1.0
PR_GET_SECCOMP = 21
PR_GET_NO_NEW_PRIVS = 39


def status_fields(pid: str = "self") -> dict[str, str]:
    out = {}
    for line in read(f"/proc/{pid}/status").splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key] = value.strip()
    return out


def prctl(option: int) -> int | None:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        result = int(libc.prctl(option, 0, 0, 0, 0))
    except (ImportError, OSError, AttributeError):
        return None
    return result if result >= 0 else None


# -- the measurements ------------------------------------------------------------------------


def probe_kernel() -> None:
    version = read("/proc/version").strip()
    uname = os.uname()
    record(
        "kernel",
        {"release": uname.release, "version": uname.version, "proc_version": version},
        "uname(2) and /proc/version",
    )


def probe_identity() -> None:
    record(
        "identity",
        {
            "uid": os.getuid(),
            "euid": os.geteuid(),
            "gid": os.getgid(),
            "egid": os.getegid(),
            "groups": sorted(os.getgroups()),
        },
        "getuid/geteuid/getgid/getegid/getgroups in the probe process",
    )


def probe_privileges() -> None:
    status = status_fields()
    caps = {k: status[k] for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb") if k in status}
    record("capabilities", caps, "/proc/self/status Cap* (hex masks)")
    if "NoNewPrivs" in status:
        record("no_new_privs", int(status["NoNewPrivs"]), "/proc/self/status NoNewPrivs")
    else:
        record("no_new_privs", prctl(PR_GET_NO_NEW_PRIVS), "prctl(PR_GET_NO_NEW_PRIVS)")
    if "Seccomp" in status:
        record("seccomp", int(status["Seccomp"]), "/proc/self/status Seccomp (0 off, 2 filter)")
    else:
        record("seccomp", prctl(PR_GET_SECCOMP), "prctl(PR_GET_SECCOMP) (0 off, 2 filter)")


def visible_processes() -> list[dict[str, Any]]:
    seen = []
    for pid in sorted((p for p in os.listdir("/proc") if p.isdigit()), key=int):
        try:
            status = status_fields(pid)
            command = read(f"/proc/{pid}/cmdline").replace("\0", " ").strip()
        except OSError:
            continue
        seen.append(
            {
                "pid": int(pid),
                "name": status.get("Name", ""),
                "command": command[:200],
                "uids": [int(u) for u in status.get("Uid", "").split()],
                "cap_eff": status.get("CapEff"),
                "no_new_privs": int(status["NoNewPrivs"]) if "NoNewPrivs" in status else None,
            }
        )
    return seen


def privileged(process: dict[str, Any]) -> bool:
    return 0 in process["uids"] or int(process["cap_eff"] or "0", 16) != 0


def probe_processes() -> None:
    """Every process the sandbox can see, with its uid and privileges, the kernel's included.

    At boot the sandbox's supervisor runs this probe just after starting the kernel, so it
    waits up to KERNEL_WAIT seconds for the kernel's process to appear before measuring. A
    list with a privileged process in it is read again for up to SETTLE_WAIT seconds, until
    none is: what is reported is the last list, so that only one that stays is found.
    """
    deadline = time.monotonic() + KERNEL_WAIT
    while True:
        seen = visible_processes()
        kernel_seen = any("ipykernel" in p["command"] for p in seen)
        if kernel_seen or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    settled = time.monotonic() + SETTLE_WAIT
    while any(privileged(p) for p in seen) and time.monotonic() < settled:
        time.sleep(0.05)
        seen = visible_processes()
    source = "/proc/<pid>/status and cmdline of every visible process"
    if not kernel_seen:
        source += f" (no ipykernel process appeared within {KERNEL_WAIT:g}s)"
    record("processes", seen, source)


PROBES = (
    probe_kernel,
    probe_identity,
    probe_privileges,
    probe_filesystems,
    probe_network,
    probe_egress,
    probe_limits,
    probe_processes,  # last: it may wait for the kernel to appear
)


def main() -> None:
    start = time.monotonic()
    for probe in PROBES:
        try:
            probe()
        except Exception as exc:  # one failed measurement must not hide the others
            errors[probe.__name__] = f"{type(exc).__name__}: {exc}"
    json.dump(
        {
            "probe": PROBE_VERSION,
            "python": sys.version.split()[0],
            "seconds": round(time.monotonic() - start, 3),
            "fields": fields,
            "errors": errors,
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
