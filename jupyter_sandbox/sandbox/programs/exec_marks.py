"""The mark every exec's processes carry, and the command lines of the supervisor and the killer
that find them by it: the half of a command's deadline that runs inside the sandbox, whatever
engine started the exec.

Each exec's environment carries a random mark (``JUPYTER_SANDBOX_EXEC=<token>``, ``new_mark``),
which every process the command starts inherits; a caller's command runs under the supervisor
(supervisor_program.py, ``supervised``), and the killer (kill_program.py, ``kill_argv``) stops
it and everything marked. Under gVisor the host also places the supervisor in a cgroup of its
command before it starts anything (``place_argv``, run as uid 0). Why, and how a backend runs the killer when a command's time is up:
sandbox/backends/docker/exec_deadline.py. Kept apart from it so that the operations (commands,
background commands) name the mark without importing an engine's client.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from jupyter_sandbox.sandbox.programs import image_programs, kill_program, supervisor_program

EXEC_MARK = "JUPYTER_SANDBOX_EXEC"

# Sent as source, as the files program is (file_program.py).
SUPERVISOR = Path(supervisor_program.__file__).read_text()
KILLER = Path(kill_program.__file__).read_text()


def new_mark() -> dict[str, str]:
    """The environment entry that marks one exec's processes (given to the exec)."""
    return {EXEC_MARK: secrets.token_hex(16)}


def supervised(argv: list[str], mark: dict[str, str]) -> list[str]:
    """``argv`` under a supervisor that the killer with the same ``mark`` finds."""
    ((_name, token),) = mark.items()
    return image_programs.python(SUPERVISOR, token, *argv)


def mark_of(argv: list[str]) -> dict[str, str] | None:
    """The mark of ``argv`` if it is a command under its supervisor (``supervised``), else
    None: for a backend that starts what it is given and places supervisors."""
    if len(argv) > 5 and argv[:5] == image_programs.python(SUPERVISOR):
        return {EXEC_MARK: argv[5]}
    return None


def kill_argv(entry: str) -> list[str]:
    """The program that kills every process of the exec marked ``entry`` (``NAME=TOKEN``) and
    its supervisor's descendants, for callers that run it through an exec of their own (a
    background command's removal). Exit status 0: none is left."""
    return image_programs.python(KILLER, entry)


def place_argv(mark: dict[str, str]) -> list[str]:
    """The program that moves the supervisor with ``mark`` into its command's cgroup, for the
    host to run as uid 0 in a runsc sandbox right after it started the supervisor
    (kill_program.py's ``place``). Exit status 0: placed; kill_program.NO_CGROUPS: the
    sandbox has no gVisor job cgroups."""
    ((_name, token),) = mark.items()
    return image_programs.python(KILLER, "place", token)
