"""What /workspace shows: the directory the kernel was launched in, or nothing.

Notebooks read files beside them, so by default /workspace is the launch directory seen through
an overlay (copy-on-write): host files are visible, writes stay in the sandbox. Directories whose
contents no sandbox should see (the filesystem root, a home directory itself with its
credentials, system trees) are never shown; the sandbox then gets an empty /workspace and the
kernel banner says why.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

MODES = ("copy-on-write", "read-only", "read-write", "none")
SYSTEM_TREES = ("/etc", "/proc", "/sys", "/dev", "/run", "/var/run", "/boot", "/var/lib/docker")
# Overlay options are comma- and colon-separated: such paths cannot be a lowerdir.
_OVERLAY_UNSAFE = (",", ":", "\n")


@dataclass(frozen=True)
class WorkspacePlan:
    """The mode actually used, the host directory shown (if any), and why it differs.

    ``within``: a directory the shown one must stay inside (a gateway's user root); the host
    then opens it from there without following links and mounts what it opened
    (host/workspace_pin.py), so a link swapped in after the check changes nothing."""

    mode: str
    source: str | None
    note: str = ""
    within: str | None = None


NO_WORKSPACE = WorkspacePlan("none", None)


def plan_workspace(
    mode: str,
    launch_dir: str | None,
    within: str | None = None,
    host_only: Sequence[Path] = (),
) -> WorkspacePlan:
    """Decide what /workspace shows for a kernel launched in ``launch_dir``, which must be
    ``within`` (a real path) or inside it when that is given; ``host_only``: directories no
    sandbox may see (the owners' credentials: NetworkSettings.credentials_dir), so a launch
    directory that is or holds one is not shown."""
    if mode == "none" or launch_dir is None:
        return NO_WORKSPACE
    try:
        path = Path(launch_dir).resolve()
    except (OSError, RuntimeError):  # a link swapped while it is read (EINVAL), a link loop
        note = "a link in it loops or changed while it was read"
        return WorkspacePlan(
            "none",
            None,
            f"files beside the notebook are not shown: {launch_dir} could not be resolved ({note})",
        )
    refusal = _refusal(path) or _outside(path, within) or _holds_host_only(path, host_only)
    if refusal:
        return WorkspacePlan("none", None, f"files beside the notebook are not shown: {refusal}")
    if mode == "copy-on-write" and any(c in str(path) for c in _OVERLAY_UNSAFE):
        return WorkspacePlan(
            "read-only",
            str(path),
            "the launch directory's name has ',' or ':': shown read-only",
            within,
        )
    return WorkspacePlan(mode, str(path), within=within)


def _outside(path: Path, within: str | None) -> str:
    if within is None or path == Path(within) or Path(within) in path.parents:
        return ""
    return f"{path} is outside {within}"


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
    if path == Path.home().resolve() or _is_home_of_its_owner(path):
        return "the launch directory is your home directory (it holds credentials); open the notebook from a sub-folder"
    for tree in SYSTEM_TREES:
        if path == Path(tree) or Path(tree) in path.parents:
            return f"{path} is a system directory"
    if not os.access(path, os.R_OK | os.X_OK):
        return f"{path} is not readable"
    return ""


def _is_home_of_its_owner(path: Path) -> bool:
    """Whether ``path`` is the home directory of the user who owns it: a gateway's kernels run
    for hub users whose home is not the server's ``Path.home()``, and whose Lab usually opens
    there (``/home/{username}``, the gateway's default user root)."""
    try:
        home = pwd.getpwuid(path.stat().st_uid).pw_dir
    except (KeyError, OSError):
        return False
    return bool(home) and Path(home).resolve() == path
