"""What a sandbox was configured to be: the yardstick its measured isolation is compared with.

Read from the sandbox's state file and the manager's settings, never from the container: the
yardstick must not come from the thing it measures.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from jupyter_sandbox.protocol.errors import SandboxError
from jupyter_sandbox.sandbox.host.state_record import SandboxState

if TYPE_CHECKING:
    from jupyter_sandbox.sandbox.sandbox_access import SandboxHost


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
        # The kernel is derived, not a field, and shown after the runtime it follows from;
        # JSON has lists, not tuples.
        fields = asdict(self)
        return {
            "runtime": self.runtime,
            "kernel": self.kernel,
            **fields,
            "capabilities": list(self.capabilities),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Expected:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["capabilities"] = tuple(known.get("capabilities") or ())
        return cls(**known)


def expected_from_state(manager: SandboxHost, state: SandboxState) -> Expected | None:
    """The configured policy of a sandbox, from its state file and the manager's settings."""
    from jupyter_sandbox.sandbox.limits import SandboxLimits

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
