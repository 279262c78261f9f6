"""Who a sandbox belongs to and what its id looks like: the checks every entry point shares.

An owner is an opaque printable name (a JupyterHub user, an OS user, an agent's tenant); the
manager compares it and never interprets it. A sandbox id is 12 lowercase hex digits, which is
also what tells a sandbox's host directory apart from the other entries of the state directory
(locks/, pool/), so the reaper and find_context use :func:`is_sandbox_id` for that. A malformed
id is reported like a missing sandbox, so that no caller learns more from a bad id than from an
unknown one.
"""

from __future__ import annotations

import getpass
import os
import re

from jupyter_sandbox.protocol.errors import InvalidSettingError, SandboxNotFoundError

_SANDBOX_ID = re.compile(r"^[0-9a-f]{12}$")


def check_owner(owner: str) -> str:
    if not owner or len(owner) > 200 or not owner.isprintable():
        raise InvalidSettingError(
            f"owner must be a printable name of 1 to 200 characters, not {owner!r}"
        )
    return owner


def default_owner() -> str:
    """The owner of sandboxes started outside a request: JUPYTER_SANDBOX_OWNER, else the
    JupyterHub user whose single-user server this is, else the OS user."""
    return (
        os.environ.get("JUPYTER_SANDBOX_OWNER")
        or os.environ.get("JUPYTERHUB_USER")
        or getpass.getuser()
    )


def is_sandbox_id(name: str) -> bool:
    return bool(_SANDBOX_ID.match(name))


def check_sandbox_id(sandbox_id: str) -> str:
    if not is_sandbox_id(sandbox_id):
        raise SandboxNotFoundError(f"no sandbox {sandbox_id!r}: ids are 12 hex digits")
    return sandbox_id
