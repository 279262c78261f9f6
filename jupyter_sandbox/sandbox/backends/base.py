"""The typed interface between sandbox policy and a container engine: what a backend must do.

:class:`SandboxManager` (manager.py) decides *what* a sandbox is: its limits, labels, host
directory and kernel. A :class:`SandboxBackend` only knows *how* to make an engine do it. The
manager is the only caller of a backend; the kernel process and the server extension talk to the
manager. Backends raise :class:`~jupyter_sandbox.protocol.errors.SandboxError` subclasses only.

This module holds what a backend is asked to do: the interface and its contract, the container
spec it creates from, and the terminal it opens. What it answers (SandboxInfo, ExecResult,
EngineFacts, EngineStats) is in records.py.
"""

from __future__ import annotations

import abc
import io
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from traitlets.config import LoggingConfigurable
from traitlets.traitlets import MetaHasTraits

from jupyter_sandbox.protocol.errors import SandboxConflictError
from jupyter_sandbox.protocol.snapshot_errors import MemorySnapshotUnsupportedError
from jupyter_sandbox.sandbox.backends.records import (
    DEFAULT_MAX_OUTPUT,
    EngineFacts,
    EngineStats,
    ExecResult,
    SandboxInfo,
)

# Where the sandbox's own host directory appears inside the container.
SANDBOX_IO_DIR = "/run/sandbox"
WORKSPACE_DIR = "/workspace"


class Writable(Protocol):
    def write(self, data: bytes, /) -> int: ...


# exec_stream: writes a command's standard input / receives its standard output in pieces.
Feed = Callable[[Writable], None]
Sink = Callable[[bytes], None]
# exec: receives a command's output as it comes, ("stdout" or "stderr", the bytes of one piece).
Output = Callable[[str, bytes], None]


@dataclass(frozen=True)
class TerminalOptions:
    """How :meth:`SandboxBackend.open_terminal` starts a shell; the manager passes it on.

    ``rows`` x ``cols``: the TTY's size (checked by the caller). ``cwd``: where the shell
    starts (default: the sandbox's working directory, /workspace). ``env`` is added to the
    sandbox's environment (checked by the caller, as a command's is); the backend's own
    variables (TERM, the kill's mark) win over it.
    """

    rows: int
    cols: int
    cwd: str | None = None
    env: dict[str, str] | None = None


@dataclass(frozen=True)
class ExecOptions:
    """How :meth:`SandboxBackend.exec` runs one command; the manager passes it on unchanged.

    ``timeout``: seconds until the command is killed. ``user``: whom it runs as (default: the
    sandbox's own user). ``stdin``, when given, is the command's whole standard input (then end
    of file). Standard output past ``max_output`` bytes raises OutputTooLargeError.
    ``environment`` is added to the sandbox's own for this command; the backend's own variables
    (the deadline's mark) win over it. A ``workdir`` (an absolute path; default: the sandbox's
    working directory, /workspace) the command cannot start in raises SandboxFileNotFoundError
    when it does not exist, else SandboxFileError.

    With ``output``, the command's standard output and error go to it piece by piece as they
    come, in the order they came, and nothing is kept: ``ExecResult.stdout`` and ``stderr`` are
    empty and ``max_output`` does not apply. It is called on the engine's executor thread, not
    the event loop's, and may block it: the command then waits for it (its output pipe fills),
    which is how a slow reader holds a command back. What it raises stops the reading (the
    command's next write fails, as past ``max_output``) and is raised by ``exec``. Output of a
    command the engine could not start (the engine's own message) never reaches it; the reason
    it gives instead comes as ``stderr``.

    ``supervised`` (the default): a caller's command, which may start processes that leave its
    session, group and environment; the kill reaches them all
    (sandbox/backends/docker/exec_deadline.py). The project's own programs do not, and pass
    False to save the supervisor's start. ``mark``: the exec's mark (exec_marks.new_mark),
    for a caller that must be able to kill the command from another process
    (sandbox/backends/docker/exec_watcher.py); a new one by default.
    """

    timeout: float = 60.0
    user: str | None = None
    stdin: bytes | None = None
    max_output: int = DEFAULT_MAX_OUTPUT
    environment: dict[str, str] | None = None
    workdir: str | None = None
    output: Output | None = None
    supervised: bool = True
    mark: dict[str, str] | None = None


@dataclass(frozen=True)
class BindMount:
    """A host directory shown inside the sandbox. Only the manager decides which."""

    source: str
    target: str
    read_only: bool = False


@dataclass(frozen=True)
class OverlayMount:
    """A copy-on-write view of ``lower`` at ``target``; writes land in ``upper``."""

    lower: str
    upper: str
    work: str
    target: str


@dataclass(frozen=True)
class ContainerSpec:
    """Everything a backend needs to create one sandbox container.

    The defaults are the hardened ones; the manager fills in the rest from SandboxSettings.
    Nothing here comes from user input without validation (runtime flags never do).
    """

    name: str
    image: str
    runtime: str  # "runsc" or "runc"; the backend maps it to the engine's runtime name
    command: list[str]
    labels: dict[str, str]
    user: str
    environment: dict[str, str]
    memory_bytes: int  # swap is always set equal: no swap
    cpus: float
    pids_limit: int  # the engine's pids cgroup limit
    cpu_period_us: int = 100_000  # the window cpus is enforced over (SandboxSettings.cpu_period_ms)
    ulimits: dict[str, int] = field(default_factory=dict)  # name -> soft = hard limit
    mounts: list[BindMount] = field(default_factory=list)
    overlays: list[OverlayMount] = field(default_factory=list)
    tmpfs: dict[str, str] = field(default_factory=dict)  # target -> complete mount options
    working_dir: str = WORKSPACE_DIR
    read_only_root: bool = True
    capabilities: tuple[str, ...] = ()  # added after dropping ALL
    no_new_privileges: bool = True
    network: str = "none"
    init: bool = True
    hostname: str = "sandbox"
    stop_timeout: int = 5
    log_max_size: str = "1m"


class Terminal(abc.ABC):
    """A shell on a TTY inside a running sandbox (:meth:`SandboxBackend.open_terminal`).

    Handed out by the manager (terminals.py: counted, and closed with it), driven by the
    server's terminal WebSocket (server_extension/terminal_handlers.py); one reader at a time.
    """

    @abc.abstractmethod
    async def read(self) -> bytes:
        """The TTY's next output as it comes; ``b""`` once the shell exited, its sandbox ended
        or the terminal was closed. Output is read ahead only into a bounded buffer: a caller
        that reads slowly holds the shell back rather than filling the server's memory."""

    @abc.abstractmethod
    async def write(self, data: bytes) -> None:
        """Type ``data``; waits while the TTY takes no more. Dropped once the terminal ended."""

    @abc.abstractmethod
    async def resize(self, rows: int, cols: int) -> None:
        """Set the TTY's size in character cells (the shell is told: SIGWINCH)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Kill the shell and every process it started, and end the output. Idempotent."""

    async def exit_status(self) -> int | None:
        """The shell's exit status, once its output ended because it exited; None while it
        runs, or when it did not end by itself (closed, its sandbox gone), or if unknown."""
        return None


class BackendMeta(abc.ABCMeta, MetaHasTraits):
    """Both metaclasses a backend has: abstract methods (abc) and traits (traitlets), as
    jupyter_client's kernel provisioners combine them."""


def lacks(backend: SandboxBackend, what: str) -> SandboxConflictError:
    """The error a backend raises for an optional capability it lacks (see SandboxBackend)."""
    return SandboxConflictError(f"this server's sandbox backend ({type(backend).__name__}) {what}")


class SandboxBackend(LoggingConfigurable, metaclass=BackendMeta):
    """One container engine. Every method is a coroutine and every call is bounded in time.

    The contract a backend meets, whatever its engine:

    - **Made from the configuration.** ``c.SandboxManager.backend_class`` names the class; the
      manager makes it on first use as ``backend_class(parent=manager)``, so the backend's own
      settings are ``config=True`` traits of its class (``c.DockerBackend.runtime_names``), read
      from the manager's configuration, and its log is the manager's. Nothing of it is
      imported before then: a kernel claiming a warm sandbox never loads it. The warm pool's
      key holds the class's name and its configuration section
      (SandboxManager.backend_key), so a member made by another backend, or by this one
      configured otherwise, is never handed out.
    - **Addressing.** Sandboxes are addressed by sandbox id; ids of containers that lack the
      project's labels (sandbox/labels.py) are treated as unknown (:class:`SandboxNotFoundError`),
      and :meth:`list_sandboxes` lists only labelled ones, which is how the reaper finds what
      this backend made. Owner checks are the manager's job.
    - **Reaching the kernel.** The manager writes the kernel's connection file into the sandbox's
      host directory and asks for it at ``SANDBOX_IO_DIR`` (the spec's ``mounts``): the kernel
      in the sandbox binds its ``ipc://`` sockets there, and the host connects to those socket
      files. A backend must make that directory the same files on both sides (a bind mount
      here), with ``network`` "none": the kernel is never reached over a network.
    - **Isolation.** Every hardening field of :class:`ContainerSpec` is enforced as given, or
      :meth:`create` refuses (SandboxError): a backend never starts a sandbox weaker than asked.
    - **Optional capabilities.** :meth:`pause` and :meth:`resume`, the checkpoints
      (:meth:`checkpoint`, :meth:`start_from_checkpoint`, :meth:`remove_checkpoint`), detached
      processes (:meth:`spawn`), terminals (:meth:`open_terminal`), :meth:`logs` and
      :meth:`end_stray_runtime_processes` have defaults here. A backend that lacks one keeps the
      default: it says so with SandboxConflictError (:func:`lacks`; for checkpoints
      MemorySnapshotUnsupportedError, which the REST API answers with 501), or does nothing where
      nothing is the right answer (no logs, no stray processes). Every other method is required.
    """

    def runtime_name(self, runtime: str) -> str:
        """The name the engine knows ``runtime`` ("runsc", "runc") by, as
        ``EngineFacts.runtimes`` lists it (the doctor's check). By default the same."""
        return runtime

    @abc.abstractmethod
    async def check_ready(self, runtime: str, image: str) -> None:
        """Raise unless the engine answers, ``runtime`` is registered and ``image`` exists.

        Called by the manager before it writes anything for a new sandbox, so that a missing
        engine or image fails in well under a second with a message naming the fix.
        """

    @abc.abstractmethod
    async def engine_facts(self) -> EngineFacts:
        """Version and capabilities of the engine; EngineUnavailableError when none answers."""

    @abc.abstractmethod
    async def image_exists(self, image: str) -> bool:
        """Whether ``image`` is present locally."""

    @abc.abstractmethod
    async def create(self, sandbox_id: str, spec: ContainerSpec) -> SandboxInfo:
        """Create (not start) the container for ``sandbox_id``."""

    @abc.abstractmethod
    async def start(self, sandbox_id: str) -> None:
        """Start a created container. A start that hangs raises SandboxStartTimeoutError."""

    @abc.abstractmethod
    async def stop(self, sandbox_id: str, timeout: int) -> None:
        """SIGTERM the sandbox, SIGKILL after ``timeout`` seconds. Stopping a stopped one is fine."""

    @abc.abstractmethod
    async def remove(self, sandbox_id: str) -> None:
        """Remove the container whatever its state. Idempotent: a missing one is not an error.

        Also ends runtime processes a failed start left behind (runsc-sandbox, runsc-gofer).
        """

    @abc.abstractmethod
    async def inspect(self, sandbox_id: str) -> SandboxInfo:
        """Current state; SandboxNotFoundError when there is no such labelled container."""

    @abc.abstractmethod
    async def list_sandboxes(self, owner: str | None = None) -> list[SandboxInfo]:
        """Every labelled sandbox container, or only those of ``owner``."""

    @abc.abstractmethod
    async def exec(self, sandbox_id: str, argv: list[str], options: ExecOptions) -> ExecResult:
        """Run ``argv`` inside a running sandbox as ``options`` say (:class:`ExecOptions`); it
        is killed after ``options.timeout`` seconds."""

    async def spawn(self, sandbox_id: str, argv: list[str], *, environment: dict[str, str]) -> str:
        """Start ``argv`` inside the sandbox, detached (it lives until it exits or the sandbox
        ends); returns an id for :meth:`spawned_exit_code`. Its parent is outside the sandbox,
        so the kernel supervisor's clean-up at a restart leaves it alone."""
        raise lacks(self, "cannot start detached processes")

    async def spawned_exit_code(self, spawn_id: str) -> int | None:
        """The exit status of a process :meth:`spawn` started; None while it runs.
        ProcessNotFoundError once the engine has forgotten it (Docker does, minutes after it
        ended)."""
        raise lacks(self, "cannot start detached processes")

    async def exec_stream(
        self,
        sandbox_id: str,
        argv: list[str],
        *,
        timeout: float,
        feed: Feed | None = None,
        sink: Sink | None = None,
    ) -> ExecResult:
        """:meth:`exec` with streamed input and output, for archives too large for memory.

        ``feed`` writes the whole standard input (then end of file); ``sink`` receives the
        standard output in pieces (``ExecResult.stdout`` is then empty). This default buffers
        both in memory; backends that can stream override it.
        """
        stdin = None
        if feed is not None:
            buffer = io.BytesIO()
            feed(buffer)
            stdin = buffer.getvalue()
        own_program = ExecOptions(timeout=timeout, stdin=stdin, supervised=False)
        result = await self.exec(sandbox_id, argv, own_program)
        if sink is None:
            return result
        sink(result.stdout)
        return ExecResult(result.exit_code, b"", result.stderr, result.timed_out)

    async def open_terminal(self, sandbox_id: str, options: TerminalOptions) -> Terminal:
        """An interactive bash on a TTY in the running sandbox, as its user, with its
        environment and TERM=xterm-256color, as ``options`` say (:class:`TerminalOptions`).

        Called by the manager only (SandboxManager.open_terminal checks the owner, the state
        and the cap first) when a client opens a terminal WebSocket. Everything the shell
        starts is marked as a command's processes are, so :meth:`Terminal.close` ends it all.
        Optional.
        """
        raise lacks(self, "cannot open terminals")

    def why_not_sealed(self, runtime: str) -> str:
        """Why this server cannot make :meth:`sealed_archive` of a sandbox of ``runtime``
        (words for a log line); "" when it can. Optional, with the method below."""
        return f"this server's sandbox backend ({type(self).__name__}) cannot seal archives"

    async def sealed_archive(
        self, sandbox_id: str, sink: Sink, *, timeout: float, max_members: int
    ) -> ExecResult:
        """A tar of the sandbox's /workspace to ``sink`` in pieces, made where no process of
        the sandbox can stop, read or replace what is written (security row 43): what it
        holds is what /workspace held. Called by snapshots/persist.py only when
        :meth:`why_not_sealed` is ""; ``max_members`` caps its entries, ``sink`` its bytes."""
        raise lacks(self, "cannot seal archives")

    @abc.abstractmethod
    async def stats(self, sandbox_id: str) -> EngineStats:
        """One sample of the sandbox's resource use as the engine measures it (no waiting)."""

    @abc.abstractmethod
    async def put_archive(self, sandbox_id: str, path: str, data: bytes) -> None:
        """Unpack the tar ``data`` at ``path`` inside the sandbox (as the engine does it)."""

    @abc.abstractmethod
    async def get_archive(self, sandbox_id: str, path: str, max_bytes: int) -> bytes:
        """A tar of ``path`` inside the sandbox; SandboxError if it exceeds ``max_bytes``."""

    async def image_file(self, sandbox_id: str, path: str, max_bytes: int) -> bytes | None:
        """The regular file ``path`` of a created, not yet started, sandbox's image (at most
        ``max_bytes``), or None where it is no such file or the backend cannot read it.
        Optional: the sandbox's trust bundle then holds the host's CAs (network/tls_ca.py)."""
        return None

    async def pause(self, sandbox_id: str) -> None:
        """Freeze every process of the sandbox. Optional."""
        raise lacks(self, "cannot pause sandboxes")

    async def resume(self, sandbox_id: str) -> None:
        """Thaw a paused sandbox. Optional (with :meth:`pause`)."""
        raise lacks(self, "cannot pause sandboxes")

    async def checkpoint(self, sandbox_id: str, name: str, *, leave_running: bool) -> None:
        """Save the running sandbox's memory and processes as checkpoint ``name``; it exits
        unless ``leave_running``. Called by snapshots/memory.py only once the sandbox holds no
        host socket (the engine's runtime may stop a sandbox whose checkpoint fails).
        Optional, with the two below."""
        raise MemorySnapshotUnsupportedError(
            f"this server's sandbox backend ({type(self).__name__}) cannot checkpoint sandboxes"
        )

    async def start_from_checkpoint(self, sandbox_id: str, name: str) -> None:
        """Start the stopped sandbox from checkpoint ``name`` instead of afresh."""
        raise MemorySnapshotUnsupportedError(
            f"this server's sandbox backend ({type(self).__name__}) cannot checkpoint sandboxes"
        )

    async def remove_checkpoint(self, sandbox_id: str, name: str) -> None:
        """Delete checkpoint ``name``; a missing one (or sandbox) is fine. A backend without
        checkpoints has none to delete."""

    async def logs(self, sandbox_id: str, tail: int = 50) -> str:
        """The last ``tail`` lines the sandbox's main process wrote (for error messages); none
        by default."""
        return ""

    async def end_stray_runtime_processes(self) -> list[int]:
        """End runtime processes whose container the engine no longer knows; return their pids.

        Called by the reaper. Processes of containers the engine still knows are never touched.
        None by default: a backend whose runtime leaves no processes behind has nothing to end.
        """
        return []

    @abc.abstractmethod
    async def close(self) -> None:
        """Release the engine connection and the executor."""
