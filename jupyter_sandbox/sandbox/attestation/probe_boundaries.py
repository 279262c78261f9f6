"""The probe's measurements of the sandbox's walls: its filesystems, network and limits.

Not imported by the package: a part of the probe script (see probe.py). run.py's
``probe_source`` joins it with probe.py into the one script the sandbox runs, this part first.
It also holds what both parts share, where the results are kept (``fields``, ``errors``,
``record``) and ``read``, so that it needs nothing of probe.py. Standard library only and
Python 3.7 or later, like all of it.

Kept apart from probe.py, which measures the probe's own process (kernel, identity, privileges,
the processes it can see) and runs every measurement: what is measured here is what confines
the sandbox (read-only and size-capped filesystems, no network interface and no egress, the
memory, pids and CPU limits of its cgroup).
"""

from __future__ import annotations

import errno
import os
import socket
import tempfile
import threading
import time
from typing import Any

EGRESS_TIMEOUT = 1.0
# Public anycast resolvers: never a private, link-local or Docker bridge address.
EGRESS_TARGETS = (
    ("ipv4", socket.AF_INET, "1.1.1.1", 443),
    ("ipv6", socket.AF_INET6, "2606:4700:4700::1111", 443),
)
DNS_NAME = "example.com"
CGROUP_ROOT = "/sys/fs/cgroup"
UNLIMITED_CGROUP = 1 << 62  # cgroup v1 reports "no limit" as a huge page-rounded number
ST_RDONLY = 1

# What the measurements found, by name, and why those that failed did (probe.py prints both).
fields: dict[str, dict[str, Any]] = {}
errors: dict[str, str] = {}


def record(name: str, value: Any, source: str) -> None:
    fields[name] = {"value": value, "source": source}


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def mounts() -> dict[str, dict[str, str]]:
    """Mount point -> {fstype, options} from /proc/self/mountinfo (the last mount wins)."""
    out = {}
    for line in read("/proc/self/mountinfo").splitlines():
        parts = line.split()
        sep = parts.index("-")
        target = parts[4].replace("\\040", " ")
        options = parts[5] + "," + (parts[sep + 3] if len(parts) > sep + 3 else "")
        out[target] = {"fstype": parts[sep + 1], "options": options.rstrip(",")}
    return out


def writable(directory: str) -> dict[str, Any]:
    try:
        fd, path = tempfile.mkstemp(prefix=".attest-", dir=directory)
    except OSError as exc:
        return {"writable": False, "errno": errno.errorcode.get(exc.errno or 0, str(exc.errno))}
    os.close(fd)
    os.unlink(path)
    return {"writable": True, "errno": None}


def filesystem(path: str, table: dict[str, dict[str, str]]) -> dict[str, Any]:
    st = os.statvfs(path)
    out: dict[str, Any] = {
        "read_only_flag": bool(st.f_flag & ST_RDONLY),
        "size_bytes": st.f_blocks * st.f_frsize,
        "free_bytes": st.f_bavail * st.f_frsize,
        "used_bytes": (st.f_blocks - st.f_bfree) * st.f_frsize,
    }
    out.update(writable(path))
    if path in table:
        out.update(table[path])
    return out


def permitted_dir(candidates: tuple[str, ...], table: dict[str, dict[str, str]]) -> str | None:
    """A directory on the root mount whose mode bits would let this process create a file.

    Only a write attempt there tells a read-only mount (EROFS) from a mere permission refusal
    (gVisor checks permissions first, so a plain EACCES in / proves nothing).
    """
    uid, groups = os.geteuid(), {os.getegid(), *os.getgroups()}
    for path in candidates:
        try:
            st = os.stat(path)
        except OSError:
            continue
        if path != "/" and path in table:  # a mount of its own, not the root filesystem
            continue
        if (
            (st.st_uid == uid and st.st_mode & 0o200)
            or (st.st_gid in groups and st.st_mode & 0o020)
            or st.st_mode & 0o002
        ):
            return path
    return None


def probe_filesystems() -> None:
    table = mounts()
    root = filesystem("/", table)
    target = permitted_dir(("/var/tmp", "/", "/etc", "/usr/local"), table)
    root["write_test_dir"] = target
    if target is not None and target != "/":
        root.update(writable(target))
    record(
        "root_fs",
        root,
        "statvfs('/') ST_RDONLY, /proc/self/mountinfo, and creating a file in a root-filesystem "
        "directory whose permissions allow it (EROFS proves read-only)",
    )
    for name, path in (("workspace_fs", "/workspace"), ("tmp_fs", "/tmp")):
        if os.path.isdir(path):
            record(name, filesystem(path, table), f"statvfs('{path}'), mountinfo, file creation")


def probe_network() -> None:
    names = []
    for line in read("/proc/net/dev").splitlines()[2:]:
        names.append(line.split(":", 1)[0].strip())
    record("interfaces", sorted(names), "/proc/net/dev")
    try:
        indexed = sorted(name for _, name in socket.if_nameindex())
    except OSError as exc:
        indexed = ["error: " + str(exc)]
    record("interfaces_ioctl", indexed, "socket.if_nameindex()")


def connect(family: int, host: str, port: int) -> str:
    start = time.monotonic()
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as exc:
        return "socket:" + errno.errorcode.get(exc.errno or 0, str(exc))
    sock.settimeout(EGRESS_TIMEOUT)
    try:
        sock.connect((host, port))
    except socket.timeout:  # noqa: UP041  (not TimeoutError before Python 3.10)
        return "timeout"
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, str(exc))
    finally:
        sock.close()
    return "connected in %.3fs" % (time.monotonic() - start)


def resolve(name: str) -> str:
    result = ["timeout"]

    def lookup() -> None:
        try:
            found = socket.getaddrinfo(name, 443, proto=socket.IPPROTO_TCP)
            result[0] = "resolved: " + ",".join(sorted({str(a[4][0]) for a in found}))
        except socket.gaierror as exc:
            result[0] = "gaierror: " + str(exc.args[-1])
        except OSError as exc:
            result[0] = errno.errorcode.get(exc.errno or 0, str(exc))

    thread = threading.Thread(target=lookup, daemon=True)
    thread.start()
    thread.join(EGRESS_TIMEOUT + 0.5)
    return result[0]


def probe_egress() -> None:
    outcomes = {}
    for label, family, host, port in EGRESS_TARGETS:
        outcomes[f"tcp_{label} {host}:{port}"] = connect(family, host, port)
    outcomes[f"dns {DNS_NAME}"] = resolve(DNS_NAME)
    blocked = not any(v.startswith(("connected", "resolved")) for v in outcomes.values())
    record(
        "egress",
        {"blocked": blocked, "attempts": outcomes},
        f"TCP connect ({EGRESS_TIMEOUT:g}s limit) to public addresses and getaddrinfo",
    )


def cgroup_dirs() -> dict[str, str]:
    """Controller -> directory of this process's cgroup ("" = unified v2)."""
    out: dict[str, str] = {}
    try:
        lines = read("/proc/self/cgroup").splitlines()
    except OSError:
        return out
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            for candidate in (
                os.path.join(CGROUP_ROOT, controller, path.lstrip("/")),
                os.path.join(CGROUP_ROOT, controller),
            ):
                if os.path.isdir(candidate):
                    out[controller] = candidate
                    break
    return out


def cgroup_value(dirs: dict[str, str], controller: str, v1: str, v2: str) -> tuple[str, str] | None:
    for key, name in ((controller, v1), ("", v2)):
        if key in dirs:
            path = os.path.join(dirs[key], name)
            try:
                return read(path).strip(), path
            except OSError:
                continue
    return None


def as_limit(text: str) -> int | None:
    if text == "max":
        return None
    number = int(text)
    return None if number >= UNLIMITED_CGROUP else number


def probe_limits() -> None:
    import resource

    dirs = cgroup_dirs()
    found = cgroup_value(dirs, "memory", "memory.limit_in_bytes", "memory.max")
    if found:
        record("memory_cgroup", as_limit(found[0]), found[1])
    swap = cgroup_value(dirs, "memory", "memory.memsw.limit_in_bytes", "memory.swap.max")
    if swap:
        record("memory_swap_cgroup", as_limit(swap[0]), swap[1])
    for line in read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            record("memory_meminfo", int(line.split()[1]) * 1024, "/proc/meminfo MemTotal")
    found = cgroup_value(dirs, "pids", "pids.max", "pids.max")
    if found:
        record("pids_cgroup", as_limit(found[0]), found[1])
    for name, which in (("nproc", resource.RLIMIT_NPROC), ("nofile", resource.RLIMIT_NOFILE)):
        soft, hard = resource.getrlimit(which)
        record(
            f"rlimit_{name}",
            {"soft": None if soft < 0 else soft, "hard": None if hard < 0 else hard},
            f"getrlimit(RLIMIT_{name.upper()})",
        )
    quota = cgroup_value(dirs, "cpu", "cpu.cfs_quota_us", "cpu.max")
    if quota:
        if quota[1].endswith("cpu.max"):
            text, _, period = quota[0].partition(" ")
            cpus = None if text == "max" else int(text) / int(period)
        else:
            period_text = read(os.path.join(os.path.dirname(quota[1]), "cpu.cfs_period_us"))
            cpus = None if int(quota[0]) < 0 else int(quota[0]) / int(period_text)
        record("cpu_cgroup", cpus, quota[1])
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    record(
        "cpu_visible",
        {"affinity": affinity, "cpu_count": os.cpu_count()},
        "sched_getaffinity, cpu_count",
    )
