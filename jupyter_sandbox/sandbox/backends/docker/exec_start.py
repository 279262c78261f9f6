"""Starting an engine exec, whether it started its command, and what to say when it did not.

An exec the engine could not start (no such program, a working directory that is not there)
ends with NOT_STARTED and no pid, and the engine's reason comes as output the command never
wrote. exec.py and stream.py read their execs' outcome here; kept apart from
them so that running an exec and judging how it began can be read, and grow, each on its own.
"""

from __future__ import annotations

import time
from typing import Any

from jupyter_sandbox.protocol.errors import (
    SandboxFileError,
    SandboxFileNotFoundError,
    SandboxFileTypeError,
)
from jupyter_sandbox.sandbox.backends.base import Output
from jupyter_sandbox.sandbox.backends.docker.engine import DockerEngine
from jupyter_sandbox.sandbox.backends.records import ExecResult
from jupyter_sandbox.sandbox.programs import image_programs

# The engine's exit status for a command it could not start (it then never had a process).
NOT_STARTED = 126
# How often run_unread asks whether its exec ended: soon at first, as most end at once, then
# ever less often, doubling up to the most, so that an exec the sandbox keeps from ending (its
# process stopped) costs the engine every owner shares a few inspects a second, not a hundred.
UNREAD_POLL_SECONDS = 0.01
UNREAD_POLL_MOST_SECONDS = 0.2


def start_exec(
    engine: DockerEngine,
    container: str,
    argv: list[str],
    *,
    start: dict[str, Any] | None = None,
    **create: Any,
) -> tuple[str, Any]:
    """Blocking: create an exec of ``argv`` in ``container`` (``create``: ``exec_create``'s
    arguments) and start it (``start``: ``exec_start``'s); its id and what the start answered.
    Every exec starts here, through the engine's gate, so that no pause of its container lands
    while it starts (exec_gate.py)."""
    api = engine.client.api
    with engine.exec_gate.starting(container, wait=engine.timeout):
        exec_id = str(api.exec_create(container, argv, **create)["Id"])
        return exec_id, api.exec_start(exec_id, **(start or {}))


def run_unread(
    engine: DockerEngine, container: str, argv: list[str], *, timeout: float, **create: Any
) -> int | None:
    """Blocking: run ``argv`` in ``container`` (``create``: ``exec_create``'s arguments) for
    its exit status alone, or None if it has not ended within ``timeout`` seconds.

    Its output is never read: the exec is started detached, with no stream attached, so
    whatever the sandbox makes it write (a library its environment preloads, a process of the
    sandbox's user writing into its descriptors) costs the host nothing. docker-py's own
    blocking start would read all of it into memory, for as long as the command lasts."""
    exec_id, _ = start_exec(
        engine,
        container,
        argv,
        start={"detach": True},
        stdout=False,
        stderr=False,
        **create,
    )
    deadline = time.monotonic() + timeout
    pause = UNREAD_POLL_SECONDS
    while True:
        inspected = engine.client.api.exec_inspect(exec_id)
        code = inspected.get("ExitCode")
        if code is not None and not inspected.get("Running"):
            return int(code)
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        time.sleep(min(pause, left))  # the last look comes at the deadline, not past it
        pause = min(pause * 2, UNREAD_POLL_MOST_SECONDS)


def emptied(container_env: list[str]) -> dict[str, str]:
    """Every variable of the container's environment, set empty, for an exec as uid 0: an
    exec's environment is the container's with its own on top, and there is no way to unset
    one. Empty, a loader variable (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT) names nothing."""
    emptied = {entry.partition("=")[0]: "" for entry in container_env}
    emptied["PATH"] = image_programs.HOST_PATH  # the exec's first program is named absolutely
    return emptied


def started(inspected: dict[str, Any]) -> bool:
    """Whether the engine started the exec's process (``exec_inspect``): one it could not start
    never had a pid, and ends with NOT_STARTED."""
    return bool(inspected.get("Pid")) or inspected.get("ExitCode") != NOT_STARTED


def once_started(api: Any, exec_id: str, output: Output) -> Output:
    """``output``, if the exec's process started (asked once, at the first piece). An exec the
    engine could not start sends the engine's reason as standard output (Docker 20.10), after
    recording the failure: not the command's output, and a caller must learn of the failure
    before any output reached it (a missing cwd is a SandboxFileNotFoundError, not a stream)."""
    verdict: list[bool] = []

    def gated(stream: str, data: bytes) -> None:
        if not verdict:
            verdict.append(started(api.exec_inspect(exec_id)))
        if verdict[0]:
            output(stream, data)

    return gated


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
    argv = image_programs.shell(_CHECK_WORKDIR, workdir)
    status = run_unread(engine, container, argv, timeout=engine.timeout, user=user)
    if status == 3:
        return SandboxFileNotFoundError(
            f"cwd {workdir} does not exist in the sandbox: create it first (e.g. mkdir -p in "
            "an earlier command) or leave cwd out for /workspace"
        )
    if status == 4:
        return SandboxFileTypeError(
            f"cwd {workdir} is not a directory in the sandbox: name a directory, or leave cwd "
            "out for /workspace"
        )
    return None
