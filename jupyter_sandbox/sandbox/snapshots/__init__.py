"""Snapshots: persist a sandbox's /workspace and restore it safely; checkpoint a live runsc
kernel and restore it (memory snapshots). The entry point is :class:`Snapshots` (``manager.snapshots``).

Modules: archive_rules (what a member may be), archive_scan (reading an archive within caps,
writing the clean one a sandbox unpacks), storage (one directory per owner, atomic writes),
persist and hydrate (the tar inside the sandbox), memory and kernel_bridge (memory snapshots),
settings (the traitlets), service (owner checks and the API), errors.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .archive_scan import ArchiveLimits, ArchiveSummary, scan_archive
    from .errors import (
        ArchiveTooLargeError,
        MemorySnapshotUnsupportedError,
        SnapshotFailedError,
        SnapshotIntegrityError,
        SnapshotNotFoundError,
        SnapshotStorageFullError,
        SnapshotTooLargeError,
        UnsafeArchiveError,
    )
    from .service import Snapshots
    from .storage import SnapshotStore, check_snapshot_id

# Loaded on first use (PEP 562), as the core package's names are: the REST client imports the
# stdlib-only errors module alone, without the service and its archive code.
_WHERE = {
    "ArchiveLimits": ".archive_scan",
    "ArchiveSummary": ".archive_scan",
    "scan_archive": ".archive_scan",
    "ArchiveTooLargeError": ".errors",
    "MemorySnapshotUnsupportedError": ".errors",
    "SnapshotFailedError": ".errors",
    "SnapshotIntegrityError": ".errors",
    "SnapshotNotFoundError": ".errors",
    "SnapshotStorageFullError": ".errors",
    "SnapshotTooLargeError": ".errors",
    "UnsafeArchiveError": ".errors",
    "Snapshots": ".service",
    "SnapshotStore": ".storage",
    "check_snapshot_id": ".storage",
}

__all__ = [
    "ArchiveLimits",
    "ArchiveSummary",
    "ArchiveTooLargeError",
    "MemorySnapshotUnsupportedError",
    "SnapshotFailedError",
    "SnapshotIntegrityError",
    "SnapshotNotFoundError",
    "SnapshotStorageFullError",
    "SnapshotStore",
    "SnapshotTooLargeError",
    "Snapshots",
    "UnsafeArchiveError",
    "check_snapshot_id",
    "scan_archive",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name], __name__), name)
    globals()[name] = value  # once found, an ordinary attribute
    return value
