"""Per-owner quotas: how many sandboxes, and how much of the host they may hold together: memory,
CPUs, processes (pids), and the memory-backed filesystems (/tmp, and /workspace's writes).

The manager checks them while creating a sandbox, after its state file is written and before
its container exists: the state file is the reservation. Two creates racing for the last slot
both see each other's reservation, so at worst both are refused; never both let through. The
kernel process and the server extension share the state directory, so the quota holds whichever
of them starts the sandbox.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traitlets import Float, Integer, Unicode, validate
from traitlets.config import LoggingConfigurable

from jupyter_sandbox.protocol.errors import QuotaExceededError
from jupyter_sandbox.sandbox.host.sandbox_dir import sandbox_directories
from jupyter_sandbox.sandbox.host.state_record import SandboxState
from jupyter_sandbox.sandbox.lifecycle.pool import unclaimed_member
from jupyter_sandbox.sandbox.limits import (
    SandboxLimits,
    format_size,
    in_setting_names,
    parse_size,
)


@dataclass(frozen=True)
class Usage:
    """What one owner's sandboxes reserve together."""

    sandboxes: int = 0
    memory_bytes: int = 0
    cpus: float = 0.0
    pids: int = 0
    tmp_bytes: int = 0
    workspace_bytes: int = 0

    def as_dict(self) -> dict[str, Any]:
        return in_setting_names(self)

    def plus(self, limits: SandboxLimits) -> Usage:
        """The usage once one more sandbox with ``limits`` exists."""
        return Usage(
            self.sandboxes + 1,
            self.memory_bytes + limits.memory_bytes,
            self.cpus + limits.cpus,
            self.pids + limits.pids,
            self.tmp_bytes + limits.tmp_bytes,
            self.workspace_bytes + limits.workspace_bytes,
        )


def counts_toward_quota(state: SandboxState) -> bool:
    """Unclaimed warm-pool members belong to nobody yet; everything else counts."""
    return not unclaimed_member(state)


def usage_of(state_dir: Path, owner: str) -> Usage:
    """Sum the reservations of ``owner``'s sandboxes from their state files."""
    usage = Usage()
    for directory in sandbox_directories(state_dir):
        state = directory.read_state()
        if state.get("owner") != owner or not counts_toward_quota(state):
            continue
        limits = state.get("limits") or {}
        usage = Usage(
            usage.sandboxes + 1,
            usage.memory_bytes + int(limits.get("memory", 0)),
            usage.cpus + float(limits.get("cpus", 0.0)),
            usage.pids + int(limits.get("pids", 0)),
            usage.tmp_bytes + int(limits.get("tmp_size", 0)),
            usage.workspace_bytes + int(limits.get("workspace_size", 0)),
        )
    return usage


class SandboxQuotas(LoggingConfigurable):
    """Limits on what one owner's sandboxes may hold at once. 0 (or '') means no limit."""

    max_sandboxes = Integer(
        10,
        config=True,
        help="Most sandboxes one owner may have at once (running or paused); 0 means no limit.",
    )
    max_memory = Unicode(
        "16g",
        config=True,
        help="""Most memory one owner's sandboxes may reserve together (the sum of their memory
        limits; bytes, or with a unit: '8g'). Empty means no limit.""",
    )
    max_cpus = Float(
        8.0,
        config=True,
        help="Most CPUs one owner's sandboxes may reserve together (sum of their limits); 0 means no limit.",
    )
    max_pids = Integer(
        4096,
        config=True,
        help="""Most processes and threads one owner's sandboxes may hold together (the sum of
        their pids limits, each one of the host's pids); 0 means no limit.""",
    )
    max_tmp_size = Unicode(
        "4g",
        config=True,
        help="""Most in-memory /tmp one owner's sandboxes may reserve together (the sum of their
        tmp_size; bytes, or with a unit: '4g'). Empty means no limit.""",
    )
    max_workspace_size = Unicode(
        "16g",
        config=True,
        help="""Most /workspace one owner's sandboxes may reserve together (the sum of their
        workspace_size, held in memory with cap_host_writes; bytes, or with a unit). Empty
        means no limit.""",
    )

    @validate("max_memory", "max_tmp_size", "max_workspace_size")
    def _valid_size(self, proposal: dict[str, Any]) -> str:
        value = str(proposal["value"]).strip()
        if value:
            parse_size(value, f"SandboxQuotas.{proposal['trait'].name}")
        return value

    def check(self, usage: Usage) -> None:
        """Raise QuotaExceededError naming the first quota ``usage`` goes over."""
        if self.max_sandboxes and usage.sandboxes > self.max_sandboxes:
            raise QuotaExceededError(
                f"quota max_sandboxes: you may have {self.max_sandboxes} sandboxes at once; stop "
                "one first (or ask for SandboxQuotas.max_sandboxes to be raised)"
            )
        if self.max_memory and usage.memory_bytes > parse_size(self.max_memory, "max_memory"):
            raise QuotaExceededError(
                f"quota max_memory: your sandboxes may reserve {self.max_memory} of memory "
                f"together and this one would make {format_size(usage.memory_bytes)}; stop a "
                "sandbox or ask for less memory"
            )
        if self.max_cpus and usage.cpus > self.max_cpus + 1e-9:
            raise QuotaExceededError(
                f"quota max_cpus: your sandboxes may reserve {self.max_cpus:g} CPUs together and "
                f"this one would make {usage.cpus:g}; stop a sandbox or ask for fewer CPUs"
            )
        if self.max_pids and usage.pids > self.max_pids:
            raise QuotaExceededError(
                f"quota max_pids: your sandboxes may hold {self.max_pids} processes together and "
                f"this one would make {usage.pids}; stop a sandbox or ask for a lower pids limit"
            )
        for quota, used, limit in (
            ("max_tmp_size", usage.tmp_bytes, "tmp_size"),
            ("max_workspace_size", usage.workspace_bytes, "workspace_size"),
        ):
            allowed = str(getattr(self, quota))
            if allowed and used > parse_size(allowed, quota):
                raise QuotaExceededError(
                    f"quota {quota}: your sandboxes may reserve {allowed} of {limit} together "
                    f"and this one would make {format_size(used)}; stop a sandbox or ask for a "
                    f"smaller {limit}"
                )

    def describe(self) -> dict[str, Any]:
        return {
            "max_sandboxes": self.max_sandboxes,
            "max_memory": parse_size(self.max_memory, "max_memory") if self.max_memory else 0,
            "max_cpus": self.max_cpus,
            "max_pids": self.max_pids,
            "max_tmp_size": parse_size(self.max_tmp_size, "max_tmp_size")
            if self.max_tmp_size
            else 0,
            "max_workspace_size": (
                parse_size(self.max_workspace_size, "max_workspace_size")
                if self.max_workspace_size
                else 0
            ),
        }
