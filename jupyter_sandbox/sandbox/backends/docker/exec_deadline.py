"""Stopping a command that an engine exec started, with everything it started, once its time
is up or its wait is given up.

Docker has no call to signal an exec's process, and under gVisor the exec's host-side process
is runsc's, not the command's. Wrapping every command in coreutils' ``timeout`` stopped it from
inside, at the price of one more program start per exec, which gVisor makes slow, on every
snapshot, restore and attestation (figures: docs/explanation/performance.md, "Figures behind
the code").

So each exec's environment carries a random mark (``JUPYTER_SANDBOX_EXEC=<token>``), which
every process the command starts inherits, and a command a caller gave (a command, a background
command, a terminal's shell: ``supervised``) runs under a supervisor (supervisor_program.py),
the subreaper of everything it starts, with the same token on its command line. When the time
is up, a second exec as the same user (kill_program.py) stops the supervisor, kills its
descendants and the marked processes in rounds until none is left, then the supervisor: a
process that leaves its session and group and empties its environment (``setsid env -i``) is
still the supervisor's descendant. The project's own programs (tar, the files and attestation
programs, named so that the sandbox cannot swap them: image_programs.py) start nothing that
hides, and run without a supervisor: its Python start would cost every file operation a
second interpreter's start (benchmarks/exec.py; figures: docs/explanation/performance.md,
"Figures behind the code"). Code in a sandbox can leave processes running anyway (its kernel runs
whatever it is given). A process that kills its own supervisor (same user) and empties its
environment is still reached under runc by the audit login uid the supervisor gave it, which it
cannot change; under gVisor, which has no audit, by the cgroup the host moved the supervisor
into before it started anything (:func:`place_supervisor`), which it cannot leave. What a
command leaves once its own process ended is the sandbox's (supervisor_program.py). The sandbox's init reaps what is killed. The mark, the supervisor's
and the killer's command lines are the same whatever the engine: sandbox/programs/exec_marks.py;
this module runs the killer through Docker.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import docker.errors

from jupyter_sandbox.protocol.errors import SandboxError
from jupyter_sandbox.sandbox import labels
from jupyter_sandbox.sandbox.backends.docker.engine import DockerEngine
from jupyter_sandbox.sandbox.backends.docker.exec_start import emptied, run_unread
from jupyter_sandbox.sandbox.programs.exec_marks import kill_argv, place_argv
from jupyter_sandbox.sandbox.programs.kill_program import NO_CGROUPS

log = logging.getLogger(__name__)

KILL_SECONDS = 10.0  # at most this long for the killing exec itself (a frozen sandbox)


async def kill_marked(
    engine: DockerEngine,
    container: str,
    user: str,
    mark: dict[str, str],
    environment: dict[str, str] | None = None,
) -> None:
    """Kill every process in ``container`` marked with ``mark``, and every descendant of the
    supervisor with its token (kill_program.py), as ``user`` (who started them, so may signal
    them): at the command's time limit, or when its wait was given up (exec.py's ExecWatch).
    Failures are logged: the caller has given up on the command already, and the engine's own
    time limit on it still ends the wait. ``environment``: variables of the killer's exec."""
    ((name, token),) = mark.items()

    def kill() -> int:
        argv = kill_argv(f"{name}={token}")
        code = run_unread(
            engine, container, argv, timeout=KILL_SECONDS, user=user, environment=environment
        )
        return code if code is not None else -1

    try:
        code = await engine.run(f"stop a command in {container}", kill, timeout=KILL_SECONDS)
    except (SandboxError, docker.errors.NotFound) as exc:
        log.warning("could not stop a command in %s: %s", container, exc)
        return
    if code != 0:
        log.warning(
            "a command being stopped in %s kept starting processes (status %s)",
            container,
            code,
        )


@contextlib.contextmanager
def supervised_start(engine: DockerEngine, container: str, mark: dict[str, str]) -> Iterator[None]:
    """Around the exec that starts a supervised command with ``mark`` in ``container``
    (blocking): once it started, its supervisor is placed (:func:`place_supervisor`), and the
    two execs pass the exec gate as one start (exec_gate.ExecGate.starting). A pause that
    landed between them would refuse the placing exec, and the supervisor would wait, its
    command not started, until it gave up."""
    with engine.exec_gate.starting(container, wait=engine.timeout):
        yield
        place_supervisor(engine, container, mark)


def place_supervisor(engine: DockerEngine, container: str, mark: dict[str, str]) -> None:
    """Blocking, right after a supervised command with ``mark`` started in ``container``
    (:func:`supervised_start`): in a runsc sandbox, move its supervisor into a cgroup of its own (kill_program.py's ``place``),
    which the supervisor waits for before it starts the command (supervisor_program.py); under
    runc nothing (the audit session holds the command there). The placing exec runs as uid 0,
    which owns gVisor's cgroups in the sandbox, with no capability (the container has none) and
    every variable of the container's environment set empty (a request may set LD_PRELOAD
    there). A failure is logged: the supervisor then ends without starting the command."""
    raw = engine.client.api.inspect_container(container)
    if (raw["Config"].get("Labels") or {}).get(labels.RUNTIME) != "runsc":
        return
    code = run_unread(
        engine,
        container,
        place_argv(mark),
        timeout=engine.timeout,
        user="0",
        environment=emptied(raw["Config"].get("Env") or []),
        workdir="/",  # not the sandbox's: one it made unsearchable would stop the start
    )
    if code == NO_CGROUPS:
        log.warning(
            "sandbox %s has no gVisor job cgroups (/sys/fs/cgroup/job): a command's process that "
            "kills its supervisor and empties its environment escapes its kill there",
            container,
        )
    elif code != 0:
        log.warning("the supervisor of a command in %s was not placed (status %s)", container, code)
