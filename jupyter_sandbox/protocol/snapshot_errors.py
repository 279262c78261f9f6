"""Errors of snapshots, each with a stable ``code`` (see errors.py for the hierarchy).

A refused archive says which member broke which rule (``member`` and ``rule`` are also
attributes, and fields of its JSON answer, so agent code, here or through the REST client, can
switch on them without parsing the message).
"""

from __future__ import annotations

from jupyter_sandbox.protocol.errors import SandboxError

# Characters of an archive's name (or link target) an error shows: names are the sandbox's or
# the uploader's bytes, up to a path's 4096 and more in a hostile header.
MAX_SHOWN = 100


def shown(text: str, limit: int = MAX_SHOWN) -> str:
    """``text`` as an error may show it: at most ``limit`` characters of it, each one that is
    not printable (a control character, an escape sequence's start, a lone surrogate) written
    as its Python escape, and how long it was when it is cut."""
    head = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[:limit])
    return head if len(text) <= limit else f"{head}... ({len(text)} characters)"


class SnapshotNotFoundError(SandboxError):
    """No snapshot with that id belongs to the caller (another owner's is 'not found' too)."""

    code = "snapshot_not_found"
    http_status = 404


class UnsafeArchiveError(SandboxError):
    """An archive was refused before anything of it was written; names the member and rule."""

    code = "unsafe_archive"
    http_status = 400
    fields = ("member", "rule")  # in its JSON answer too

    def __init__(self, member: str, rule: str, detail: str) -> None:
        member = shown(member)
        where = f"member {member!r}" if member else "the archive"
        super().__init__(f"archive refused: {where}: {detail} (rule: {rule})")
        self.member = member
        self.rule = rule


class ArchiveTooLargeError(UnsafeArchiveError):
    """An archive exceeds the byte, member or expansion cap (Snapshots settings)."""

    code = "archive_too_large"
    http_status = 413


class SnapshotTooLargeError(SandboxError):
    """A workspace's archive exceeds the snapshot byte cap; nothing was stored."""

    code = "snapshot_too_large"
    http_status = 413

    @classmethod
    def over_cap(cls, sandbox_id: str, max_bytes: int) -> SnapshotTooLargeError:
        """The error for a /workspace archive past ``max_bytes``, whichever transport saw it."""
        return cls(
            f"the archive of sandbox {sandbox_id}'s /workspace exceeds the snapshot cap of "
            f"{max_bytes} bytes (Snapshots.max_archive_bytes); nothing was stored"
        )


class SnapshotIntegrityError(SandboxError):
    """A stored snapshot's bytes no longer match the sha256 recorded when it was made."""

    code = "snapshot_corrupt"
    http_status = 409


class SnapshotStorageFullError(SandboxError):
    """The disk holding snapshots is full; the partial file was removed, the sandbox untouched."""

    code = "snapshot_storage_full"
    http_status = 507


class SnapshotFailedError(SandboxError):
    """Making or restoring a snapshot inside the sandbox failed (tar's message is included)."""

    code = "snapshot_failed"
    http_status = 500


class MemorySnapshotUnsupportedError(SandboxError):
    """A memory snapshot (checkpoint of the live kernel) cannot be taken safely here."""

    code = "memory_snapshot_unsupported"
    http_status = 501


class MemorySnapshotRefusedError(MemorySnapshotUnsupportedError):
    """This sandbox cannot have a memory snapshot, for what the caller chose: its runtime, a
    sandbox not made for them, its network. The server can (else the 501 above): a conflict
    with the sandbox, which the message says how to avoid (a new sandbox made for it)."""

    code = "memory_snapshot_refused"
    http_status = 409
