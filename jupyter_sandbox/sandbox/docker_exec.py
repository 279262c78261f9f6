"""Commands inside a Docker sandbox: exec with bounded output, and tar streams in and out.

Docker's own archive API cannot reach a sandbox's files: the root is read-only and /workspace is
a tmpfs (gVisor keeps it inside the sandbox altogether). So archives are made and unpacked by
``tar`` running inside the sandbox as its non-root user, streamed over the exec's socket.

The exec's raw socket is read directly, so a wait on a sandbox that died can be cut off by
shutting the socket down; the engine never ends such an exec by itself (seen after gVisor's OOM
kill), and a worker thread would otherwise be held for good.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import docker.errors
from docker.utils.socket import demux_adaptor, frames_iter

from .backend_records import DEFAULT_MAX_OUTPUT, ExecResult, SandboxInfo
from .engine import DockerEngine
from .errors import (
    OutputTooLargeError,
    SandboxDiedError,
    SandboxError,
    SandboxFileError,
    SandboxFileNotFoundError,
    SandboxNotFoundError,
)
from .exec_deadline import kill_marked, new_mark

# Reads the sandbox's current state; polled so that a wait ends when the sandbox dies.
Inspect = Callable[[], Awaitable[SandboxInfo]]
# How often a running exec checks that its sandbox still lives (seconds).
WATCH_SECONDS = 0.5
# The engine's exit status for a command it could not start (it then never had a process).
NOT_STARTED = 126
# How long an exec's output may take to end after its processes were killed (seconds).
KILL_GRACE = 10.0


async def run_exec(
    engine: DockerEngine,
    container: str,
    argv: list[str],
    *,
    timeout: float,
    inspect: Inspect,
    user: str = "",
    stdin: bytes | None = None,
    max_output: int = DEFAULT_MAX_OUTPUT,
    environment: dict[str, str] | None = None,
    workdir: str | None = None,
) -> ExecResult:
    """Run ``argv`` in ``container``; stop it after ``timeout`` s; stdout capped at ``max_output``.

    ``inspect`` is an async callable returning the sandbox's SandboxInfo; it is polled so that
    the wait ends as soon as the sandbox dies. ``environment`` is added to the container's own
    (the engine merges them, these winning); ``workdir`` replaces the container's working
    directory: one the command cannot start in raises a SandboxFileError (see workdir_error).
    """
    mark = new_mark()  # what kills the command when its time is up (exec_deadline.py)
    sockets: list[Any] = []
    # The mark last: a caller's variable of the same name must not unmark the command, which
    # would then outlive its time limit (commands.py refuses such a request before it gets here).
    env = {**(environment or {}), **mark}

    def run() -> ExecResult:
        api = engine.client.api
        exec_id = api.exec_create(
            container, argv, user=user, stdin=stdin is not None, environment=env, workdir=workdir
        )["Id"]
        sock = api.exec_start(exec_id, socket=True)
        sockets.append(sock)
        try:
            if stdin is not None:
                raw = _raw(sock)
                raw.sendall(stdin)
                raw.shutdown(socket.SHUT_WR)  # end of input: tar sees EOF
            out, err = _collect(sock, max_output)
        finally:
            sock.close()
        inspected = api.exec_inspect(exec_id)
        if workdir is not None and not started(inspected):
            problem = workdir_error(engine, container, user, workdir)
            if problem is not None:
                raise problem
        return exec_result(inspected, argv, out, err)

    watch = ExecWatch(engine, container, user, mark, timeout, inspect, sockets)
    return await watch.wait(run, timeout + KILL_GRACE)


def started(inspected: dict[str, Any]) -> bool:
    """Whether the engine started the exec's process (``exec_inspect``): one it could not start
    never had a pid, and ends with NOT_STARTED."""
    return bool(inspected.get("Pid")) or inspected.get("ExitCode") != NOT_STARTED


def exec_result(inspected: dict[str, Any], argv: list[str], out: bytes, err: bytes) -> ExecResult:
    """The result of a finished exec, from the engine's ``exec_inspect`` and its output."""
    code = inspected.get("ExitCode")
    exit_code = int(code) if code is not None else -1
    if not started(inspected):
        # The runtime's reason comes as text the command never wrote: unframed from some
        # engines, which the output's reader cannot parse, and as standard output from others
        # (Docker 20.10: "OCI runtime exec failed: ..."). Neither is the command's output.
        out = b""
        err = (
            f"{argv[0]!r} could not be started in the sandbox: no such program, or not "
            "executable by the sandbox's user\n"
        ).encode()
    return ExecResult(exit_code, out, err)


# Why a working directory was refused, checked as the sandbox's user from its usual working
# directory: "$0" is the path. The statuses are read by workdir_error.
_CHECK_WORKDIR = '[ -e "$0" ] || exit 3; [ -d "$0" ] || exit 4'


def workdir_error(
    engine: DockerEngine, container: str, user: str, workdir: str
) -> SandboxFileError | None:
    """Why an exec could not start in ``workdir``, or None when the directory is not why.

    Blocking (it runs on the engine's executor, after the failed exec). A missing directory
    fails the exec at its start (exit status NOT_STARTED, no pid, nothing made in the sandbox)
    under both runtimes, but the engine says why only in free text, which differs between
    runtimes and versions (runc: 'chdir to cwd ("/x") set in config.json failed: no such file
    or directory', runsc: 'failed to find initial working directory "/x"'). So the sandbox is
    asked instead, by one more exec that only reads; it is paid only when an exec with a
    working directory failed to start. runc also refuses a file ('not a directory'); runsc
    starts the command there, and its relative paths fail. Both start it in a directory the
    user may not search (the runtime enters it before dropping privileges): every lookup from
    there is still refused to the user, so that gains nothing, and is left to the runtimes;
    nor is such a directory blamed when the start failed, since it is not why.
    """
    api = engine.client.api
    check = api.exec_create(container, ["/bin/sh", "-c", _CHECK_WORKDIR, workdir], user=user)
    api.exec_start(check["Id"])
    status = api.exec_inspect(check["Id"]).get("ExitCode")
    if status == 3:
        return SandboxFileNotFoundError(
            f"cwd {workdir} does not exist in the sandbox: create it first (e.g. mkdir -p in "
            "an earlier command) or leave cwd out for /workspace"
        )
    if status == 4:
        return SandboxFileError(
            f"cwd {workdir} is not a directory in the sandbox: name a directory, or leave cwd "
            "out for /workspace"
        )
    return None


@dataclass
class ExecWatch:
    """What watches a running exec: its time limit and its sandbox's life.

    ``sockets`` are the exec's sockets, appended by ``run`` once it has them: when the sandbox
    dies they are shut, so that the worker thread is freed rather than left reading forever.
    """

    engine: DockerEngine
    container: str
    user: str
    mark: dict[str, str]
    timeout: float
    inspect: Inspect
    sockets: list[Any]

    async def wait(self, run: Callable[[], ExecResult], limit: float) -> ExecResult:
        """``run`` (a blocking exec) on the engine's executor, within ``limit`` seconds in all.

        After ``timeout`` seconds the command's processes are killed (its output then ends) and
        the result says it timed out; if the sandbox dies meanwhile, SandboxDiedError.
        """
        loop = asyncio.get_running_loop()
        call = asyncio.ensure_future(
            self.engine.run(f"exec in {self.container}", run, timeout=limit)
        )
        deadline = loop.time() + self.timeout
        timed_out = False
        try:
            while True:
                wait = WATCH_SECONDS if timed_out else min(WATCH_SECONDS, deadline - loop.time())
                if (await asyncio.wait({call}, timeout=max(wait, 0)))[0]:
                    break
                if not timed_out and loop.time() >= deadline:
                    timed_out = True
                    await kill_marked(self.engine, self.container, self.user, self.mark)
                info = await self.inspect()
                if not info.running and info.status != "paused":
                    raise SandboxDiedError(
                        f"sandbox {info.sandbox_id} ended while running a command: "
                        f"{info.death_cause()}"
                    )
            result = call.result()
            return replace(result, timed_out=True) if timed_out else result
        except docker.errors.NotFound:
            raise SandboxNotFoundError(f"no sandbox container {self.container}") from None
        finally:
            call.cancel()
            for sock in self.sockets:
                with contextlib.suppress(OSError, AttributeError):
                    _raw(sock).shutdown(socket.SHUT_RDWR)


def _raw(sock: Any) -> socket.socket:
    """docker-py wraps the real socket in a SocketIO; reach through it."""
    return getattr(sock, "_sock", sock)  # type: ignore[no-any-return]


def _collect(sock: Any, max_output: int) -> tuple[bytes, bytes]:
    out, err = bytearray(), bytearray()
    for stream, data in frames_iter(sock, tty=False):  # type: ignore[no-untyped-call]
        stdout, stderr = demux_adaptor(stream, data)
        if stdout:
            out += stdout
            if len(out) > max_output:
                raise OutputTooLargeError(f"the command's output exceeds {max_output} bytes")
        if stderr and len(err) < 1024**2:  # stderr is for error messages: keep the first MiB
            err += stderr
    return bytes(out), bytes(err)


async def put_tar(
    engine: DockerEngine,
    container: str,
    path: str,
    data: bytes,
    *,
    inspect: Inspect,
    timeout: float,
) -> None:
    """Unpack the tar ``data`` into ``path`` inside the sandbox, as the sandbox's own user."""
    result = await run_exec(
        engine,
        container,
        ["tar", "-x", "-C", path, "--no-same-owner", "--no-same-permissions"],
        stdin=data,
        inspect=inspect,
        timeout=timeout,
        max_output=1024**2,
    )
    if result.exit_code != 0:
        raise SandboxError(
            f"unpacking an archive at {path} failed: {result.stderr.decode(errors='replace')[:500]}"
        )


async def get_tar(
    engine: DockerEngine, container: str, path: str, *, max_bytes: int, inspect: Any, timeout: float
) -> bytes:
    """A tar of the contents of ``path`` inside the sandbox, made there; at most ``max_bytes``."""
    try:
        result = await run_exec(
            engine,
            container,
            ["tar", "-c", "-C", path, "."],
            inspect=inspect,
            timeout=timeout,
            max_output=max_bytes,
        )
    except OutputTooLargeError:
        raise OutputTooLargeError(f"the archive of {path} exceeds {max_bytes} bytes") from None
    if result.exit_code != 0:
        raise SandboxError(
            f"archiving {path} failed: {result.stderr.decode(errors='replace')[:500]}"
        )
    return result.stdout
