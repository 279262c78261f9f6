"""What /workspace shows: the directory the kernel was launched in, or nothing.

Notebooks read files beside them, so by default /workspace is the launch directory seen through
an overlay (copy-on-write): host files are visible, writes stay in the sandbox. Directories whose
contents no sandbox should see (the filesystem root, the home directory itself with its
credentials, system trees) are never shown; the sandbox then gets an empty /workspace and the
kernel banner says why.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

MODES = ("copy-on-write", "read-only", "read-write", "none")
SYSTEM_TREES = ("/etc", "/proc", "/sys", "/dev", "/run", "/var/run", "/boot", "/var/lib/docker")
# Overlay options are comma- and colon-separated: such paths cannot be a lowerdir.
_OVERLAY_UNSAFE = (",", ":", "\n")


@dataclass(frozen=True)
class WorkspacePlan:
    """The mode actually used, the host directory shown (if any), and why it differs."""

    mode: str
    source: str | None
    note: str = ""


NO_WORKSPACE = WorkspacePlan("none", None)


def plan_workspace(
    mode: str, launch_dir: str | None, host_only: Sequence[Path] = ()
) -> WorkspacePlan:
    """Decide what /workspace shows for a kernel launched in ``launch_dir``; ``host_only``:
    directories no sandbox may see (the owners' credentials: NetworkSettings.credentials_dir),
    so a launch directory that is or holds one is not shown."""
    if mode == "none" or launch_dir is None:
        return NO_WORKSPACE
    path = Path(launch_dir).resolve()
    refusal = _refusal(path) or _holds_host_only(path, host_only)
    if refusal:
        return WorkspacePlan("none", None, f"files beside the notebook are not shown: {refusal}")
    if mode == "copy-on-write" and any(c in str(path) for c in _OVERLAY_UNSAFE):
        return WorkspacePlan(
            "read-only", str(path), "the launch directory's name has ',' or ':': shown read-only"
        )
    return WorkspacePlan(mode, str(path))


def _holds_host_only(path: Path, host_only: Sequence[Path]) -> str:
    for directory in host_only:
        resolved = directory.resolve()
        if resolved == path or path in resolved.parents:
            return f"{path} holds {resolved}, which only the host may read"
    return ""


def _refusal(path: Path) -> str:
    if not path.is_dir():
        return f"{path} is not a directory"
    if path == Path("/"):
        return "the launch directory is the filesystem root"
    if path == Path.home().resolve():
        return "the launch directory is your home directory (it holds credentials); open the notebook from a sub-folder"
    for tree in SYSTEM_TREES:
        if path == Path(tree) or Path(tree) in path.parents:
            return f"{path} is a system directory"
    if not os.access(path, os.R_OK | os.X_OK):
        return f"{path} is not readable"
    return ""
