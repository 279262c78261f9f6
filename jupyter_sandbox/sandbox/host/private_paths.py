"""Directories the server makes on the host for itself: private to its user, every level.

``Path.mkdir(mode=0o700, parents=True)`` gives that mode to the last directory only; the
parents it makes get the umask's default (0755 as a rule), so a state directory made on the way
to a lock file listed every sandbox id and context name to other host users. Directories that
exist already are left as they are: their owner chose their mode.
"""

from __future__ import annotations

from pathlib import Path


def make_private_dir(path: Path) -> None:
    """Make ``path`` and those of its parents that are missing, each 0700 (umask allowing)."""
    missing: list[Path] = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        directory.mkdir(mode=0o700, exist_ok=True)
