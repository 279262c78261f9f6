"""Stopping a command that an engine exec started, once its time is up.

Docker has no call to signal an exec's process, and under gVisor the exec's host-side process
is runsc's, not the command's. Wrapping every command in coreutils' ``timeout`` stopped it from
inside, at the price of one more program start per exec, which gVisor makes slow: ``true``
takes 95 ms through an exec and ``timeout 10 true`` 130 ms (runc: 76 and 79 ms), on every
snapshot, restore and attestation.

So each exec's environment carries a random mark (``JUPYTER_SANDBOX_EXEC=<token>``), which
every process the command starts inherits. When the time is up, a second exec as the same user
kills every process in the sandbox whose environment holds the mark, and the process group the
command leads, in rounds until none is left (a process may fork while its siblings are being
killed). That reaches what ``timeout`` reached (the group) and children that left the group,
which it missed. A process that both leaves the group and empties its environment escapes; the
commands run this way are the project's own (tar, the attestation probe) and the manager's
``exec`` for callers, and code in a sandbox can leave processes running anyway (its kernel runs
whatever it is given). The sandbox's init reaps what is killed.
"""

from __future__ import annotations

import logging
import secrets

import docker.errors

from .engine import DockerEngine
from .errors import SandboxError

log = logging.getLogger(__name__)

EXEC_MARK = "JUPYTER_SANDBOX_EXEC"
KILL_SECONDS = 10.0  # at most this long for the killing exec itself (a frozen sandbox)

# $0 is the whole environment entry to match. grep reads each process's environment as
# NUL-separated entries (-z) and names the files holding the exact entry (-x, -l); a process
# that ended meanwhile is an unreadable file, hence 2>/dev/null (and no reliance on grep's
# status, which is 2 when any file was unreadable). A marked process that leads its process
# group (the exec's command does: the engine starts it in a session of its own) has its whole
# group killed, which also reaches a child that emptied its environment; the group of a process
# that is not its leader may be the sandbox's init's, so it is left alone. The third field after
# the ")" closing the command name in /proc/PID/stat is the process group; "kill -KILL -PGID"
# without "--", which dash's kill refuses. Exits 1 if marked processes outlive 5 rounds.
_KILL_MARKED = (
    "for round in 1 2 3 4 5; do "
    'found=$(grep -lzx -- "$0" /proc/[0-9]*/environ 2>/dev/null); '
    '[ -n "$found" ] || exit 0; '
    "for f in $found; do "
    "p=${f#/proc/}; p=${p%/environ}; "
    'stat=$(cat "/proc/$p/stat" 2>/dev/null) || continue; '
    "set -- ${stat##*) }; "
    '[ "$3" = "$p" ] && kill -KILL "-$p" 2>/dev/null; '
    'kill -KILL "$p" 2>/dev/null; '
    "done; done; exit 1"
)


def kill_script() -> str:
    """The shell script that kills every process marked with its ``$0`` (``NAME=TOKEN``), for
    callers that run it through an exec of their own (a background command's removal)."""
    return _KILL_MARKED


def new_mark() -> dict[str, str]:
    """The environment entry that marks one exec's processes (given to ``exec_create``)."""
    return {EXEC_MARK: secrets.token_hex(16)}


async def kill_marked(
    engine: DockerEngine, container: str, user: str, mark: dict[str, str]
) -> None:
    """Kill every process in ``container`` marked with ``mark``, as ``user`` (who started
    them, so may signal them): at the command's time limit, or when its wait was given up
    (docker_exec.ExecWatch). Failures are logged: the caller has given up on the command
    already, and the engine's own time limit on it still ends the wait."""
    ((name, token),) = mark.items()

    def kill() -> int:
        api = engine.client.api
        argv = ["sh", "-c", _KILL_MARKED, f"{name}={token}"]
        exec_id = api.exec_create(container, argv, user=user)["Id"]
        api.exec_start(exec_id)
        code = api.exec_inspect(exec_id).get("ExitCode")
        return int(code) if code is not None else -1

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
