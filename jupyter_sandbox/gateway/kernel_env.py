"""What a gateway client may choose for its kernel, and where the kernel's files come from.

Jupyter Server's GatewayClient sends a new kernel's choices as its environment: every
``KERNEL_*`` variable of the user's server, and ``KERNEL_WORKING_DIR``, the notebook's
directory there. The gateway reads only the names below; each becomes the variable a Sandboxed
Python kernel reads (kernel/kernel_request.py), whose values the manager then checks against
the gateway's settings and the owner's quotas as for any kernel. Other ``KERNEL_*`` names
(``KERNEL_USERNAME``, ``KERNEL_LAUNCH_TIMEOUT``, …) are ignored: the owner is the token's hub
user, never a name the client sends.

==========================  =================================================================
KERNEL_SANDBOX_CONTEXT      JUPYTER_SANDBOX_CONTEXT: a named context the kernel (re)attaches to
KERNEL_SANDBOX_RUNTIME      JUPYTER_SANDBOX_RUNTIME
KERNEL_SANDBOX_IMAGE        JUPYTER_SANDBOX_IMAGE
KERNEL_SANDBOX_NETWORK      JUPYTER_SANDBOX_NETWORK
KERNEL_SANDBOX_LIMITS       JUPYTER_SANDBOX_LIMITS
KERNEL_WORKING_DIR          the kernel's working directory, shown as /workspace: it must be
                            inside the owner's root (``SandboxGateway.user_root``)
==========================  =================================================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_sandbox.kernel.kernel_request import WORKSPACE_ROOT_ENV_VAR
from jupyter_sandbox.protocol.errors import InvalidSettingError

CHOICES = {
    "KERNEL_SANDBOX_CONTEXT": "JUPYTER_SANDBOX_CONTEXT",
    "KERNEL_SANDBOX_RUNTIME": "JUPYTER_SANDBOX_RUNTIME",
    "KERNEL_SANDBOX_IMAGE": "JUPYTER_SANDBOX_IMAGE",
    "KERNEL_SANDBOX_NETWORK": "JUPYTER_SANDBOX_NETWORK",
    "KERNEL_SANDBOX_LIMITS": "JUPYTER_SANDBOX_LIMITS",
}
WORKING_DIR = "KERNEL_WORKING_DIR"
MAX_VALUE_LENGTH = 4096  # characters: an allowlist of hosts is the longest a choice gets
MAX_VARIABLES = 256  # a server's KERNEL_* variables; more is no client's environment

# The gateway's own secrets and settings are never a kernel process's: it needs the engine,
# not the hub (its token may act for the service).
_NOT_INHERITED = ("JUPYTERHUB_", "JUPYTER_GATEWAY_", "JUPYTER_TOKEN")


@dataclass(frozen=True)
class KernelLaunch:
    """The environment and working directory of one owner's kernel process."""

    env: dict[str, str]
    cwd: str


def kernel_launch(
    sent: Any, owner: str, user_root: Path, base_env: Mapping[str, str] = os.environ
) -> KernelLaunch:
    """The launch of ``owner``'s kernel from the ``env`` object a client sent (None: none).

    InvalidSettingError says which variable is wrong and what to send instead."""
    chosen = _choices(sent)
    env = {
        name: value
        for name, value in base_env.items()
        if not name.startswith(_NOT_INHERITED) and name not in CHOICES.values()
    }
    env.update({CHOICES[name]: value for name, value in chosen.items() if name in CHOICES})
    env["JUPYTER_SANDBOX_OWNER"] = owner
    cwd = working_directory(chosen.get(WORKING_DIR), user_root)
    # Checked here by its path; the kernel opens it again from the root, following no link,
    # and has the engine mount what it opened (sandbox/host/workspace_pin.py, row 124).
    env[WORKSPACE_ROOT_ENV_VAR] = str(working_directory(None, user_root))
    return KernelLaunch(env=env, cwd=str(cwd))


def _choices(sent: Any) -> dict[str, str]:
    if sent is None:
        return {}
    if not isinstance(sent, dict):
        raise InvalidSettingError("a kernel's 'env' must be an object of strings")
    if len(sent) > MAX_VARIABLES:
        raise InvalidSettingError(f"a kernel's 'env' has more than {MAX_VARIABLES} variables")
    chosen: dict[str, str] = {}
    for name, value in sent.items():
        if name not in CHOICES and name != WORKING_DIR:
            continue  # KERNEL_USERNAME and the like: not the client's to choose here
        if not isinstance(value, str):
            raise InvalidSettingError(f"{name} must be a string")
        if len(value) > MAX_VALUE_LENGTH or not value.isprintable():
            raise InvalidSettingError(
                f"{name} must be printable text of at most {MAX_VALUE_LENGTH} characters"
            )
        if value:
            chosen[name] = value
    return chosen


def user_root_of(template: str, owner: str) -> Path:
    """``SandboxGateway.user_root`` for ``owner``: its ``{username}`` filled in."""
    if "/" in owner or owner in (".", ".."):
        raise InvalidSettingError(f"the hub user {owner!r} cannot name a directory")
    return Path(template.format(username=owner))


def working_directory(asked: str | None, user_root: Path) -> Path:
    """The real directory ``asked`` names (symlinks followed), which must be ``user_root`` or
    inside it; none asked: the root itself."""
    try:
        root = user_root.resolve(strict=True)
    except OSError:
        raise InvalidSettingError(
            f"the gateway cannot see this user's files: {user_root} does not exist on its "
            "host; set SandboxGateway.user_root to where users' files are"
        ) from None
    if asked is None:
        return root
    path = Path(asked)
    if not path.is_absolute():
        raise InvalidSettingError(f"{WORKING_DIR} must be an absolute path, not {asked!r}")
    try:
        real = path.resolve(strict=True)
    except OSError:
        raise InvalidSettingError(
            f"{WORKING_DIR} {asked!r} does not exist on the gateway's host"
        ) from None
    if not real.is_dir():
        raise InvalidSettingError(f"{WORKING_DIR} {asked!r} is not a directory")
    if real != root and root not in real.parents:
        how = " through a symbolic link" if Path(os.path.normpath(path)) != real else ""
        raise InvalidSettingError(
            f"{WORKING_DIR} {asked!r} leads outside your files ({root}){how}: open the "
            "notebook from a directory under it"
        )
    return real
