"""E2B's home and user in a jupyter-sandbox sandbox: ``/home/user`` is ``/workspace`` and user
``user`` is the sandbox's own (unprivileged) user.

E2B's SDKs name paths under ``/home/user`` and run everything as ``user`` unless told otherwise;
a sandbox here has one user and its files under ``/workspace``. Paths are mapped both ways at
the API (what a client sends, and the paths in what it gets back), so code written for E2B sees
the paths it named. What cannot be honoured is refused: another user (``root``), since the
sandbox has none.
"""

from __future__ import annotations

import base64
import binascii

from jupyter_sandbox.e2b_api.errors import E2BUnsupportedError

E2B_HOME = "/home/user"
WORKSPACE = "/workspace"
E2B_USER = "user"
MAX_AUTHORIZATION = 1024  # characters of an Authorization header read


def to_sandbox(path: str) -> str:
    """``path`` as the sandbox names it: under /workspace where E2B's is under /home/user."""
    if path == E2B_HOME or path == E2B_HOME + "/":
        return WORKSPACE
    if path.startswith(E2B_HOME + "/"):
        return WORKSPACE + path[len(E2B_HOME) :]
    return path


def to_e2b(path: str) -> str:
    """``path`` as an E2B client expects it: under /home/user where the sandbox's is under
    /workspace."""
    if path == WORKSPACE:
        return E2B_HOME
    if path.startswith(WORKSPACE + "/"):
        return E2B_HOME + path[len(WORKSPACE) :]
    return path


def check_user(user: str | None) -> None:
    """Refuse any user but E2B's default one (None: not named, the default)."""
    if user is None or user == "" or user == E2B_USER:
        return
    raise E2BUnsupportedError(
        f"user {user!r} is not available: a jupyter-sandbox sandbox runs everything as its one "
        f"unprivileged user, which E2B calls {E2B_USER!r}; leave user out (or pass "
        f"user={E2B_USER!r})"
    )


def user_of_authorization(header: str | None) -> str | None:
    """The user envd's ``Authorization: Basic base64(USER:)`` header names (None: none)."""
    if header is None:
        return None
    scheme, _, value = header[:MAX_AUTHORIZATION].partition(" ")
    if scheme.lower() != "basic":
        raise E2BUnsupportedError(
            "the Authorization header of a sandbox request must be Basic base64(USER:), as "
            "E2B's SDK sends it to name a user"
        )
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise E2BUnsupportedError(
            "the Authorization header's Basic credentials are not base64 of USER: "
        ) from None
    return decoded.partition(":")[0]
