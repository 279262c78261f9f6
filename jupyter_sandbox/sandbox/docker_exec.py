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
from .errors import OutputTooLargeError, SandboxDiedError, SandboxError, SandboxNotFoundError
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
) -> ExecResult:
    """Run ``argv`` in ``container``; stop it after ``timeout`` s; stdout capped at ``max_output``.

    ``inspect`` is an async callable returning the sandbox's SandboxInfo; it is polled so that
    the wait ends as soon as the sandbox dies.
    """
    mark = new_mark()  # what kills the command when its time is up (exec_deadline.py)
    sockets: list[Any] = []

    def run() -> ExecResult:
        api = engine.client.api
        exec_id = api.exec_create(
            container, argv, user=user, stdin=stdin is not None, environment=mark
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
        return exec_result(api.exec_inspect(exec_id), argv, out, err)

    watch = ExecWatch(engine, container, user, mark, timeout, inspect, sockets)
    return await watch.wait(run, timeout + KILL_GRACE)


def exec_result(inspected: dict[str, Any], argv: list[str], out: bytes, err: bytes) -> ExecResult:
    """The result of a finished exec, from the engine's ``exec_inspect`` and its output."""
    code = inspected.get("ExitCode")
    exit_code = int(code) if code is not None else -1
    if not inspected.get("Pid") and exit_code == NOT_STARTED:
        # The runtime's reason comes as unframed text, which the output's reader cannot parse.
        err = (
            f"{argv[0]!r} could not be started in the sandbox: no such program, or not "
            "executable by the sandbox's user\n"
        ).encode()
    return ExecResult(exit_code, out, err)


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
