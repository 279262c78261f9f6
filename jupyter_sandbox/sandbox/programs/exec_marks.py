"""The mark every exec's processes carry, and the command lines of the supervisor and the killer
that find them by it: the half of a command's deadline that runs inside the sandbox, whatever
engine started the exec.

Each exec's environment carries a random mark (``JUPYTER_SANDBOX_EXEC=<token>``, ``new_mark``),
which every process the command starts inherits; a caller's command runs under the supervisor
(supervisor_program.py, ``supervised``), and the killer (kill_program.py, ``kill_argv``) stops
it and everything marked. Why, and how a backend runs the killer when a command's time is up:
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


def kill_argv(entry: str) -> list[str]:
    """The program that kills every process of the exec marked ``entry`` (``NAME=TOKEN``) and
    its supervisor's descendants, for callers that run it through an exec of their own (a
    background command's removal). Exit status 0: none is left."""
    return image_programs.python(KILLER, entry)
