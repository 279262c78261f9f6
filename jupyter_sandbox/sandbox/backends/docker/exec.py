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
from dataclasses import dataclass, field, replace
from typing import Any

import docker.errors

from jupyter_sandbox.protocol.errors import (
    OutputTooLargeError,
    SandboxDiedError,
    SandboxError,
    SandboxFileError,
    SandboxNotFoundError,
)
from jupyter_sandbox.sandbox.backends.base import ExecOptions, Output
from jupyter_sandbox.sandbox.backends.docker.attached import AttachedExec, start_attached
from jupyter_sandbox.sandbox.backends.docker.engine import DockerEngine
from jupyter_sandbox.sandbox.backends.docker.exec_deadline import kill_marked, supervised_start
from jupyter_sandbox.sandbox.backends.docker.exec_start import (
    exec_result,
    once_started,
    started,
    workdir_error,
)
from jupyter_sandbox.sandbox.backends.records import ExecResult, SandboxInfo
from jupyter_sandbox.sandbox.programs import image_programs
from jupyter_sandbox.sandbox.programs.exec_marks import new_mark
from jupyter_sandbox.sandbox.programs.exec_marks import supervised as supervised_argv

# Reads the sandbox's current state; polled so that a wait ends when the sandbox dies.
Inspect = Callable[[], Awaitable[SandboxInfo]]
# How often a running exec checks that its sandbox still lives (seconds).
WATCH_SECONDS = 0.5
# How long an exec's output may take to end after its processes were killed (seconds).
KILL_GRACE = 10.0


async def run_exec(
    engine: DockerEngine, container: str, argv: list[str], options: ExecOptions, *, inspect: Inspect
) -> ExecResult:
    """Run ``argv`` in ``container`` as ``options`` say (ExecOptions: time limit, output cap,
    input, environment, working directory, streamed output, supervisor, mark).

    ``inspect`` is an async callable returning the sandbox's SandboxInfo; it is polled so that
    the wait ends as soon as the sandbox dies. The environment is added to the container's own
    (the engine merges them, these winning); the working directory replaces the container's: one
    the command cannot start in raises a SandboxFileError (see workdir_error).
    """
    user = options.user or ""
    stdin, output, workdir, timeout = (
        options.stdin,
        options.output,
        options.workdir,
        options.timeout,
    )
    # What kills the command when its time is up (sandbox/backends/docker/exec_deadline.py).
    mark = new_mark() if options.mark is None else options.mark
    watch = ExecWatch(engine, container, user, mark, timeout, inspect)
    started_argv = supervised_argv(argv, mark) if options.supervised else argv

    def run() -> ExecResult:
        api = engine.client.api
        # A supervised command starts once its supervisor is placed (under gVisor).
        with (
            supervised_start(engine, container, mark)
            if options.supervised
            else contextlib.nullcontext()
        ):
            exec_id, attached = watch.start(
                started_argv, options.environment, stdin=stdin is not None, workdir=workdir
            )
        try:
            if stdin is not None:
                attached.socket.sendall(stdin)
                attached.socket.shutdown(socket.SHUT_WR)  # end of input: tar sees EOF
            gated = None if output is None else once_started(api, exec_id, output)
            out, err = _collect(attached, options.max_output, gated)
        finally:
            # Shut, not only closed: the real socket outlives the SocketIO (the response holds
            # it), and an engine left writing to it, its output refused, wedged the sandbox's
            # later execs (seen: Docker 20.10, the kill of a "yes" past max_output).
            attached.shutdown()
            attached.close()
        inspected = api.exec_inspect(exec_id)
        if workdir is not None and not started(inspected):
            problem = workdir_error(engine, container, user, workdir)
            if problem is not None:
                raise problem
        result = exec_result(inspected, argv, out, err)
        if output is not None and result.stderr:  # why it could not start: its only output
            output("stderr", result.stderr)
            result = replace(result, stderr=b"")
        return result

    return await watch.wait(run, timeout + KILL_GRACE)


@dataclass
class ExecWatch:
    """What watches a running exec: its time limit and its sandbox's life.

    ``connections`` are the exec's connections, added by :meth:`start`: when the sandbox dies
    they are shut, so that the worker thread is freed rather than left reading forever.
    """

    engine: DockerEngine
    container: str
    user: str
    mark: dict[str, str]
    timeout: float
    inspect: Inspect
    # What the killer's exec is given besides the container's environment: the sealed
    # archiver's (sealed_archive.py), so that no variable the sandbox chose reaches a killer
    # running as its uid 0.
    environment: dict[str, str] | None = None
    connections: list[AttachedExec] = field(default_factory=list)

    def start(
        self, argv: list[str], environment: dict[str, str] | None, **create: Any
    ) -> tuple[str, AttachedExec]:
        """Blocking: start the watched exec of ``argv`` as the watch's user, attached (its
        connection is shut when the wait ends); its id and that connection. ``environment`` is
        added to the container's, and the mark after it: a caller's variable of the same name
        must not unmark the command, which would then outlive its time limit
        (sandbox/operations/commands.py refuses such a request before it gets here).
        ``create``: more of ``exec_create``'s arguments (stdin, workdir, privileged)."""
        exec_id, attached = start_attached(
            self.engine,
            self.container,
            argv,
            user=self.user,
            environment={**(environment or {}), **self.mark},
            **create,
        )
        self.connections.append(attached)
        return exec_id, attached

    async def wait(self, run: Callable[[], ExecResult], limit: float) -> ExecResult:
        """``run`` (a blocking exec) on the engine's executor, within ``limit`` seconds in all.

        After ``timeout`` seconds the command's processes are killed (its output then ends) and
        the result says it timed out; if the sandbox dies meanwhile, SandboxDiedError. A wait
        that ends otherwise before the command did (cancelled, its output refused) kills them
        too before it raises (within KILL_SECONDS).
        """
        loop = asyncio.get_running_loop()
        # A thread of the long calls' lane: the command holds it as long as it runs.
        call = asyncio.ensure_future(
            self.engine.run(f"exec in {self.container}", run, timeout=limit, long=True)
        )
        deadline = loop.time() + self.timeout
        timed_out = False
        ended = False  # the command, or its sandbox: then there is nothing left to kill
        try:
            while True:
                wait = WATCH_SECONDS if timed_out else min(WATCH_SECONDS, deadline - loop.time())
                if (await asyncio.wait({call}, timeout=max(wait, 0)))[0]:
                    break
                if not timed_out and loop.time() >= deadline:
                    timed_out = True
                    await kill_marked(
                        self.engine, self.container, self.user, self.mark, self.environment
                    )
                info = await self.inspect()
                if not info.alive:
                    ended = True
                    raise SandboxDiedError(
                        f"sandbox {info.sandbox_id} ended while running a command: "
                        f"{info.death_cause()}"
                    )
            failure = None if call.cancelled() else call.exception()
            # It ended, or never started (a cwd it could not start in: workdir_error).
            ended = not call.cancelled() and (
                failure is None or isinstance(failure, SandboxFileError)
            )
            result = call.result()
            return replace(result, timed_out=True) if timed_out else result
        except docker.errors.NotFound:
            ended = True
            raise SandboxNotFoundError(f"no sandbox container {self.container}") from None
        except SandboxNotFoundError:
            ended = True
            raise
        finally:
            call.cancel()
            for attached in self.connections:
                attached.shutdown()
            if not ended:
                # Given up on: cancelled (a client that left a stream, a server stopping), or
                # its output refused (past max_output, a reader that left). Nobody would see it
                # end, and a command whose output nobody reads blocks on it for good: it must
                # not run on, nor what it started.
                await kill_marked(
                    self.engine, self.container, self.user, self.mark, self.environment
                )


def _collect(
    attached: AttachedExec, max_output: int, output: Output | None = None
) -> tuple[bytes, bytes]:
    """The exec's standard output (at most ``max_output`` bytes) and error (its first MiB);
    or, with ``output``, nothing: each piece goes to it as it is read, with no cap."""
    out, err = bytearray(), bytearray()
    for stream, data in attached.frames():
        if output is not None:
            output(stream, data)
        elif stream == "stdout":
            out += data
            if len(out) > max_output:
                raise OutputTooLargeError(f"the command's output exceeds {max_output} bytes")
        elif len(err) < 1024**2:  # stderr is for error messages: keep the first MiB
            err += data
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
        image_programs.tar("-x", "-C", path, "--no-same-owner", "--no-same-permissions"),
        ExecOptions(timeout=timeout, stdin=data, max_output=1024**2, supervised=False),
        inspect=inspect,
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
            image_programs.tar("-c", "-C", path, "."),
            ExecOptions(timeout=timeout, max_output=max_bytes, supervised=False),
            inspect=inspect,
        )
    except OutputTooLargeError:
        raise OutputTooLargeError(f"the archive of {path} exceeds {max_bytes} bytes") from None
    if result.exit_code != 0:
        raise SandboxError(
            f"archiving {path} failed: {result.stderr.decode(errors='replace')[:500]}"
        )
    return result.stdout
