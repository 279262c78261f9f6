"""Snapshots: persist a sandbox's /workspace and restore it safely; checkpoint a live runsc
kernel and restore it (memory snapshots). The entry point is :class:`Snapshots` (``manager.snapshots``).

Modules: archive_rules (what a member may be), archive_scan (reading an archive within caps,
writing the clean one a sandbox unpacks), storage (one directory per owner, atomic writes),
persist and hydrate (the tar inside the sandbox), memory and kernel_bridge (memory snapshots),
settings (the traitlets), service (owner checks and the API), errors.
"""

from __future__ import annotations

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
