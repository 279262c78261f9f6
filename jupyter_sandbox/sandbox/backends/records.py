"""What a backend answers: the records of a sandbox, a command, the engine and a cgroup sample.

:class:`SandboxInfo`, :class:`ExecResult`, :class:`EngineFacts` and :class:`EngineStats` are
plain values that travel far beyond the backend (the manager, attestation, stats, snapshots, the
REST models), while :class:`~.backend.SandboxBackend` and the container spec it takes matter only
to the manager and the engine. Kept apart so that the readers of a record need not read the
interface, and the interface file stays about what an engine is asked to do.
"""

from __future__ import annotations

from dataclasses import dataclass

from jupyter_sandbox.protocol.statuses import SandboxStatus


@dataclass(frozen=True)
class SandboxInfo:
    """What the engine says about one sandbox container right now."""

    sandbox_id: str
    container_id: str
    name: str
    owner: str
    runtime: str
    image: str
    status: SandboxStatus
    labels: dict[str, str]
    host_dir: str
    created: str
    exit_code: int | None = None
    oom_killed: bool = False
    image_id: str = ""  # the engine's id of the image the container runs ("sha256:...")

    @property
    def running(self) -> bool:
        return self.status == "running"

    @property
    def alive(self) -> bool:
        """Whether its processes still exist: running, or paused (frozen, not ended)."""
        return self.running or self.status == "paused"

    def death_cause(self) -> str:
        """Why a sandbox that is not running stopped, in words a person can act on."""
        if self.oom_killed:
            return (
                "it was killed for using more memory than its limit; restart with a larger "
                "memory limit (SandboxSettings.memory_limit) or use less memory"
            )
        if self.exit_code == 137 and self.runtime == "runsc":
            # Under gVisor the host's OOM killer ends the sandbox itself, and the engine does
            # not always record that as an OOM kill.
            return (
                "its container was killed (SIGKILL, exit code 137), most likely for using more "
                "memory than its limit; restart with a larger memory limit "
                "(SandboxSettings.memory_limit) or use less memory"
            )
        if self.exit_code == 137:
            return "its container was killed (SIGKILL, exit code 137)"
        if self.status in ("exited", "dead"):
            return f"its container {self.status} with code {self.exit_code}"
        return f"its container is {self.status}"


# Standard output a command may send back (bytes); past it, OutputTooLargeError.
DEFAULT_MAX_OUTPUT = 64 * 1024**2


@dataclass(frozen=True)
class ExecResult:
    """Outcome of a command run inside a sandbox."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False


@dataclass(frozen=True)
class EngineFacts:
    """What the engine says of itself (for the doctor and the attestation)."""

    version: str
    runtimes: frozenset[str]  # runtime names registered with the engine
    cgroup_version: str
    swap_limit: bool  # whether memory+swap limits are enforced
    kernel_version: str = ""  # the engine host's kernel release (uname -r)
    experimental: bool = False  # the daemon's experimental mode (checkpoints need it)
    root_dir: str = ""  # the engine's data directory (where it keeps checkpoints)


@dataclass(frozen=True)
class EngineStats:
    """One sample of what the engine reads from a sandbox's host cgroup (None: not reported).

    Under runsc the cgroup holds gVisor's sentry and gofer, so memory and pids count them too.
    """

    cpu_ns: int | None  # CPU time used since the container started
    system_cpu_ns: int | None  # the host's CPU time counter at the same moment
    online_cpus: int | None
    memory_usage: int | None  # bytes, page cache included
    memory_inactive_file: int | None  # bytes of reclaimable page cache in memory_usage
    memory_limit: int | None
    memory_swap_limit: int | None  # memory + swap (cgroup v1 memsw); None when not reported
    pids: int | None
    pids_limit: int | None
