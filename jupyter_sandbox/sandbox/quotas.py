"""Per-owner quotas: how many sandboxes, and how much memory and CPU they may hold together.

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

from .errors import QuotaExceededError
from .hostdir import sandbox_directories
from .limits import SandboxLimits, format_size, parse_size
from .pool import unclaimed_member


@dataclass(frozen=True)
class Usage:
    """What one owner's sandboxes reserve together."""

    sandboxes: int = 0
    memory_bytes: int = 0
    cpus: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"sandboxes": self.sandboxes, "memory": self.memory_bytes, "cpus": self.cpus}

    def plus(self, limits: SandboxLimits) -> Usage:
        """The usage once one more sandbox with ``limits`` exists."""
        return Usage(
            self.sandboxes + 1, self.memory_bytes + limits.memory_bytes, self.cpus + limits.cpus
        )


def counts_toward_quota(state: dict[str, Any]) -> bool:
    """Unclaimed warm-pool members belong to nobody yet; everything else counts."""
    return not unclaimed_member(state)


def usage_of(state_dir: Path, owner: str) -> Usage:
    """Sum the reservations of ``owner``'s sandboxes from their state files."""
    sandboxes, memory, cpus = 0, 0, 0.0
    for directory in sandbox_directories(state_dir):
        state = directory.read_state()
        if state.get("owner") != owner or not counts_toward_quota(state):
            continue
        limits = state.get("limits") or {}
        sandboxes += 1
        memory += int(limits.get("memory", 0))
        cpus += float(limits.get("cpus", 0.0))
    return Usage(sandboxes, memory, cpus)


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

    @validate("max_memory")
    def _valid_memory(self, proposal: dict[str, Any]) -> str:
        value = str(proposal["value"]).strip()
        if value:
            parse_size(value, "SandboxQuotas.max_memory")
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

    def describe(self) -> dict[str, Any]:
        return {
            "max_sandboxes": self.max_sandboxes,
            "max_memory": parse_size(self.max_memory, "max_memory") if self.max_memory else 0,
            "max_cpus": self.max_cpus,
        }
