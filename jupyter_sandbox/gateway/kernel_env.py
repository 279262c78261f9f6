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

import asyncio
import concurrent.futures
import contextlib
import os
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_sandbox.kernel.kernel_request import WORKSPACE_ROOT_ENV_VAR, KernelRequest
from jupyter_sandbox.protocol.errors import HostFilesTimeoutError, InvalidSettingError
from jupyter_sandbox.sandbox.host.timeouts import within

if TYPE_CHECKING:
    from jupyter_sandbox.sandbox.settings import SandboxSettings

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
    inside it; none asked: the root itself.

    Whatever is not a directory inside the root gets one and the same answer, whether it is
    outside as written, leaves through a symbolic link, is a file or does not exist: the
    gateway looks as root, and different answers would tell a user which paths exist in
    other users' homes. A path outside as written is refused before any look at the host."""
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
    outside = InvalidSettingError(
        f"{WORKING_DIR} {asked!r} is not a directory within your files ({user_root}), "
        "symbolic links followed: open the notebook from a directory under it"
    )
    # As written (the root as configured, or its real path), without following anything.
    lexical = Path(os.path.normpath(path))
    if not any(_within(lexical, top) for top in (Path(os.path.normpath(user_root)), root)):
        raise outside
    try:
        real = path.resolve(strict=True)
        is_directory = real.is_dir()
    except OSError:
        raise outside from None
    if not is_directory or not _within(real, root):
        raise outside
    return real


def _within(path: Path, top: Path) -> bool:
    return path == top or top in path.parents


# The looks at the host's files a kernel start takes (its working directory and the user's
# root) run on threads of their own, each bounded in time: a mount that hangs (NFS, autofs)
# must not stall the gateway's event loop, which serves every user, nor the loop's default
# threads. A user whose looks still hang holds at most MAX_LOOKS_PER_USER of these threads.
LOOK_SECONDS = 10.0
LOOK_THREADS = 8
MAX_LOOKS_PER_USER = 2
_looks = ThreadPoolExecutor(max_workers=LOOK_THREADS, thread_name_prefix="gateway-files")
_looking: Counter[str] = Counter()


async def checked_launch(
    sent: Any, owner: str, user_root: Path, base_env: Mapping[str, str] = os.environ
) -> KernelLaunch:
    """:func:`kernel_launch` off the event loop, within LOOK_SECONDS; HostFilesTimeoutError
    when the host's files do not answer in time, or ``owner``'s earlier looks still hang."""
    if _looking[owner] >= MAX_LOOKS_PER_USER:
        raise HostFilesTimeoutError(
            f"the gateway is still waiting for the host to show {user_root}: try again once "
            "it answers, or ask the administrator to look at that mount"
        )
    loop = asyncio.get_running_loop()
    _looking[owner] += 1
    look: concurrent.futures.Future[KernelLaunch] = _looks.submit(
        kernel_launch, sent, owner, user_root, base_env
    )
    # Counted until its thread ends (or it is dropped before it starts), not until we stop
    # waiting: a hung look holds its thread still.
    look.add_done_callback(lambda _: _call_on(loop, _looked, owner))
    try:
        return await within(asyncio.wrap_future(look), LOOK_SECONDS)
    except asyncio.TimeoutError:
        raise HostFilesTimeoutError(
            f"the host did not show {user_root} in time (a mount that does not answer?): try "
            "again later, or ask the administrator to look at that mount"
        ) from None


def _looked(owner: str) -> None:
    _looking[owner] -= 1
    if _looking[owner] <= 0:
        del _looking[owner]


def _call_on(loop: asyncio.AbstractEventLoop, call: Any, *args: Any) -> None:
    with contextlib.suppress(RuntimeError):  # the loop was closed meanwhile: nothing to count
        loop.call_soon_threadsafe(call, *args)


def check_choices(env: Mapping[str, str], settings: SandboxSettings) -> None:
    """Refuse a kernel's choices (its launch's ``env``) as its kernel would, before the kernel
    starts: the syntax of each (kernel/kernel_request.py), and the image and limits against
    what the settings allow, as ``jupyter sandbox install-kernel`` checks a kernelspec's.
    Quotas are the manager's, when the kernel makes its sandbox."""
    try:
        KernelRequest.allowed(env, settings)
    except InvalidSettingError as exc:
        # Named as the client sent them: each KERNEL_SANDBOX_X became JUPYTER_SANDBOX_X.
        raise InvalidSettingError(
            exc.message.replace("JUPYTER_SANDBOX_", "KERNEL_SANDBOX_")
        ) from None
