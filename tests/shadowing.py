"""Modules a user could leave where the host's processes start: a ``jupyter_sandbox`` package and
a ``json.py`` that, if imported, write a marker file (and stop the program) instead of working.

The proxy kernel starts in the notebook's directory and the zygote and network proxy in the
server's; users write both through JupyterLab. jupyter_sandbox/sandbox/host/python_command.py keeps them
off ``sys.path``; a test plants these where a process starts, then asks :func:`imported`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MARKER = ".shadow-imported"
# Written for the marker's path, so it lands in the planted directory whatever the process's
# working directory is by the time it imports.
_SHADOW = """\
import pathlib
pathlib.Path({marker!r}).write_text(__name__)
raise SystemExit("imported the user's {name} instead of the real one")
"""


def sources(directory: Path) -> dict[str, str]:
    """The shadowing modules for ``directory`` (relative path -> text), each writing the marker
    there if imported."""
    marker = str(directory / MARKER)
    return {
        "jupyter_sandbox/__init__.py": _SHADOW.format(marker=marker, name="jupyter_sandbox"),
        "json.py": _SHADOW.format(marker=marker, name="json"),
    }


def plant(directory: Path) -> Path:
    """Put the shadowing modules into ``directory``; returns it."""
    for relative, text in sources(directory).items():
        (directory / relative).parent.mkdir(exist_ok=True)
        (directory / relative).write_text(text)
    return directory


def imported(directory: Path) -> str | None:
    """The name of the planted module a process imported from ``directory``, if any did."""
    marker = directory / MARKER
    return marker.read_text() if marker.exists() else None


@contextmanager
def working_directory(directory: Path) -> Iterator[Path]:
    """This process in ``directory`` for the block (contextlib.chdir is Python 3.11+)."""
    before = os.getcwd()
    os.chdir(directory)
    try:
        yield directory
    finally:
        os.chdir(before)
