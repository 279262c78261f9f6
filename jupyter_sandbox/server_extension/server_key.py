"""The server's secret keys in the state directory, and the MACs made with them: what a
credential that outlives a restart is made of (a port link, port_links.py; an E2B access
token, e2b_api/keys.py).

Each kind of credential has a key file of its own, made once (0600, KEY_BYTES random bytes) by
the first server that needs it, so that what one kind signed can never pass for another's.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import os
from pathlib import Path
from typing import ClassVar, TypeVar

KEY_BYTES = 32
MAC_BYTES = 24  # of the HMAC kept: 192 bits, 32 characters of base64url

_Keyed = TypeVar("_Keyed", bound="ServerMac")


def state_key(state_path: Path, name: str) -> bytes:
    """The server's secret key in file ``name`` of the state directory, made now if missing
    (0600, KEY_BYTES random bytes): it outlives a restart, so what it signed stays good."""
    path = state_path / name
    state_path.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(KEY_BYTES))
    key = path.read_bytes()
    if len(key) < KEY_BYTES:  # a server stopped between creating and writing it
        raise OSError(f"{path} is shorter than {KEY_BYTES} bytes: remove it and restart")
    return key


class ServerMac:
    """Makes MACs under one of the server's keys (one per server, built at start); a subclass
    names its key file (``key_file``) and says what it signs."""

    key_file: ClassVar[str]

    def __init__(self, key: bytes) -> None:
        self._key = key

    @classmethod
    def in_state_directory(cls: type[_Keyed], state_path: Path) -> _Keyed:
        """Keyed by ``state_path``'s ``key_file``, made now if missing (see state_key)."""
        return cls(state_key(state_path, cls.key_file))

    def mac(self, message: bytes) -> str:
        """The HMAC-SHA256 of ``message`` under the key, its first MAC_BYTES in base64url."""
        digest = hmac.new(self._key, message, hashlib.sha256).digest()[:MAC_BYTES]
        return base64.urlsafe_b64encode(digest).decode()
