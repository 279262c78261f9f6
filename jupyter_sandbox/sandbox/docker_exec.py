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
from typing import Any

import docker.errors
from docker.utils.socket import demux_adaptor, frames_iter

from .backend_records import ExecResult, SandboxInfo
from .engine import DockerEngine
from .errors import SandboxDiedError, SandboxError, SandboxNotFoundError

# Reads the sandbox's current state; polled so that a wait ends when the sandbox dies.
Inspect = Callable[[], Awaitable[SandboxInfo]]
# How often a running exec checks that its sandbox still lives (seconds).
WATCH_SECONDS = 0.5
# Exit statuses of coreutils' timeout when it had to stop the command.
TIMED_OUT = (124, 137)


class OutputTooLarge(SandboxError):
    code = "output_too_large"
    http_status = 413


async def run_exec(
    engine: DockerEngine,
    container: str,
    argv: list[str],
    *,
    timeout: float,
    inspect: Inspect,
    user: str = "",
    stdin: bytes | None = None,
    max_output: int = 64 * 1024**2,
) -> ExecResult:
    """Run ``argv`` in ``container``; stop it after ``timeout`` s; stdout capped at ``max_output``.

    ``inspect`` is an async callable returning the sandbox's SandboxInfo; it is polled so that
    the wait ends as soon as the sandbox dies.
    """
    # coreutils' timeout kills the command inside the sandbox, so nothing keeps running after
    # we give up; the exit status tells that it did.
    wrapped = ["timeout", "--kill-after=2", f"{timeout:g}", *argv]
    sockets: list[Any] = []

    def run() -> ExecResult:
        api = engine.client.api
        exec_id = api.exec_create(container, wrapped, user=user, stdin=stdin is not None)["Id"]
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
        code = api.exec_inspect(exec_id).get("ExitCode")
        exit_code = int(code) if code is not None else -1
        return ExecResult(exit_code, out, err, timed_out=exit_code in TIMED_OUT)

    return await run_watched(engine, container, run, timeout + 10, inspect, sockets)


async def run_watched(
    engine: DockerEngine,
    container: str,
    run: Callable[[], ExecResult],
    limit: float,
    inspect: Inspect,
    sockets: list[Any],
) -> ExecResult:
    """``run`` (a blocking exec) on the engine's executor, watching the sandbox meanwhile: if it
    dies the wait ends with SandboxDiedError, and the exec's ``sockets`` are shut so that the
    worker thread is freed rather than left reading forever."""
    call = asyncio.ensure_future(engine.run(f"exec in {container}", run, timeout=limit))
    try:
        while not (await asyncio.wait({call}, timeout=WATCH_SECONDS))[0]:
            info = await inspect()
            if not info.running and info.status != "paused":
                raise SandboxDiedError(
                    f"sandbox {info.sandbox_id} ended while running a command: {info.death_cause()}"
                )
        return call.result()
    except docker.errors.NotFound:
        raise SandboxNotFoundError(f"no sandbox container {container}") from None
    finally:
        call.cancel()
        for sock in sockets:
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
                raise OutputTooLarge(f"the command's output exceeds {max_output} bytes")
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
    except OutputTooLarge:
        raise OutputTooLarge(f"the archive of {path} exceeds {max_bytes} bytes") from None
    if result.exit_code != 0:
        raise SandboxError(
            f"archiving {path} failed: {result.stderr.decode(errors='replace')[:500]}"
        )
    return result.stdout
