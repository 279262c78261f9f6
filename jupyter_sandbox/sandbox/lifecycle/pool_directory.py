"""The warm pool's own files: tickets, wanted-key records and the refill lock.

Everything under ``<state_dir>/pool`` (the layout is in pool.py's docstring) is read and written
here and nowhere else. Kept apart from pool.py, which decides what those files mean (keys,
claims, stale members): this module only knows where they are and how each is made, listed and
removed, so the pool's policy and its bookkeeping on disk can be read one at a time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from jupyter_sandbox.sandbox.host.private_paths import make_private_dir
from jupyter_sandbox.sandbox.host.process_lock import ProcessLock
from jupyter_sandbox.sandbox.host.sandbox_dir import write_json_atomic

POOL_DIR = "pool"
WANTED_DIR = "wanted"
# Most wanted-key records kept on disk; WarmPool.max_keys cannot exceed it.
MAX_WANTED = 64


def is_pool_key(name: str) -> bool:
    """Whether ``name`` has the form of a pool key (16 hex digits; see pool.pool_key)."""
    return len(name) == 16 and all(c in "0123456789abcdef" for c in name)


def _owner_tag(owner: str) -> str:
    return hashlib.sha256(owner.encode()).hexdigest()[:16]


class PoolDirectory:
    """Tickets, wanted-key records and the refiller lock under ``<state_dir>/pool``."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.root = state_dir / POOL_DIR
        self.wanted_dir = self.root / WANTED_DIR

    def pool_keys(self) -> list[str]:
        """Every key that has a ticket directory."""
        try:
            return sorted(e.name for e in self.root.iterdir() if is_pool_key(e.name))
        except FileNotFoundError:
            return []

    def tickets(self, key: str) -> list[str]:
        """Sandbox ids of the unclaimed members of ``key``, oldest first."""
        try:
            entries = list(os.scandir(self.root / key))
        except FileNotFoundError:
            return []
        stamped = []
        for entry in entries:
            with contextlib.suppress(FileNotFoundError):  # claimed meanwhile
                stamped.append((entry.stat().st_mtime, entry.name))
        return [name for _, name in sorted(stamped)]

    def has_ticket(self, key: str, sandbox_id: str) -> bool:
        return (self.root / key / sandbox_id).exists()

    def add_ticket(self, key: str, sandbox_id: str) -> None:
        self.root.mkdir(mode=0o700, exist_ok=True)
        (self.root / key).mkdir(mode=0o700, exist_ok=True)
        (self.root / key / sandbox_id).touch(mode=0o600, exist_ok=False)

    def remove_ticket(self, key: str, sandbox_id: str) -> None:
        (self.root / key / sandbox_id).unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # not empty, or gone: both fine
            (self.root / key).rmdir()

    def refill_lock_path(self, owner: str) -> Path:
        return self.root / f"refill-{_owner_tag(owner)}.lock"

    def refiller_running(self, owner: str) -> bool:
        """Whether a process keeps ``owner``'s pool warm now (it holds the refill lock)."""
        return ProcessLock.is_held(self.refill_lock_path(owner))

    # -- wanted keys ---------------------------------------------------------------------------

    def record_wanted(self, key: str, record: dict[str, Any]) -> None:
        """Remember that a request of ``key`` missed (its file's mtime says when, last)."""
        make_private_dir(self.wanted_dir)
        write_json_atomic(self.wanted_dir / f"{key}.json", record)
        for stale in self.wanted()[MAX_WANTED:]:
            self.forget_wanted(stale[0])

    def wanted(self) -> list[tuple[str, dict[str, Any]]]:
        """(key, record) of every wanted key, most recently wanted first."""
        try:
            files = list(self.wanted_dir.glob("*.json"))
        except FileNotFoundError:
            return []
        found = []
        for path in files:
            try:
                found.append((path.stat().st_mtime, path.stem, json.loads(path.read_text())))
            except (OSError, ValueError):
                continue
        found.sort(key=lambda item: item[0], reverse=True)
        return [(key, record) for _, key, record in found if isinstance(record, dict)]

    def forget_wanted(self, key: str) -> None:
        (self.wanted_dir / f"{key}.json").unlink(missing_ok=True)
