"""Where snapshots live on the host: one 0700 directory per owner, two files per snapshot.

Layout::

    <snapshot_dir>/<sha256 of the owner, 32 hex>/
        <id>.tar     the workspace archive (plain tar), 0600
        <id>.json    its metadata: id, owner, source sandbox, image, runtime, size, sha256...

Owner names are opaque (anything printable), so they never become paths themselves: the
directory is named by a hash of the owner, and the metadata records the owner too, checked on
every read. Snapshot ids are 16 lowercase hex digits, a single path segment; anything else is
"not found", as is another owner's snapshot.

Writes are atomic: a file is written under a temporary name starting with '.' in the same
directory, fsynced, then renamed into place; the metadata is renamed last and is what makes a
snapshot exist, so no half-written snapshot is ever listed. A full disk (ENOSPC, EDQUOT) removes
the partial file and raises SnapshotStorageFullError. What a workspace snapshot's metadata holds
is decided here too (:func:`workspace_metadata`), beside the files that keep it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import secrets
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from jupyter_sandbox.protocol.errors import SandboxError
from jupyter_sandbox.protocol.snapshot_errors import SnapshotNotFoundError, SnapshotStorageFullError
from jupyter_sandbox.sandbox.backends.records import SandboxInfo
from jupyter_sandbox.sandbox.host.clock import now_iso
from jupyter_sandbox.sandbox.host.private_paths import make_private_dir
from jupyter_sandbox.sandbox.identity import check_owner
from jupyter_sandbox.sandbox.snapshots.archive_scan import ArchiveSummary

_SNAPSHOT_ID = re.compile(r"^[0-9a-f]{16}$")
_FULL = (errno.ENOSPC, errno.EDQUOT)
TEMP_PREFIX = ".tmp-"
WRITEBACK_SECONDS = 0.05  # how often an archive being written is sent on to the disk


def new_snapshot_id() -> str:
    return secrets.token_hex(8)


def workspace_metadata(
    summary: ArchiveSummary, info: SandboxInfo | None, note: str
) -> dict[str, Any]:
    """The metadata a new workspace snapshot of ``summary``'s archive is stored with (``commit``
    adds the owner); ``info`` is the sandbox it was made from, None for an imported archive."""
    return {
        "id": new_snapshot_id(),
        "kind": "workspace",
        # Microseconds: listings sort by it, and two snapshots often share a second.
        "created": now_iso("auto"),
        "source": {
            "sandbox": info.sandbox_id if info else None,
            "image": info.image if info else None,
            "runtime": info.runtime if info else None,
        },
        "size": summary.size,
        "sha256": summary.sha256,
        "members": summary.members,
        "file_bytes": summary.file_bytes,
        "note": note[:200],
    }


def check_snapshot_id(snapshot_id: str) -> str:
    """``snapshot_id`` if it is one; a malformed id is reported like a missing snapshot."""
    if not isinstance(snapshot_id, str) or not _SNAPSHOT_ID.match(snapshot_id):
        raise SnapshotNotFoundError(
            f"no snapshot {snapshot_id!r}: snapshot ids are 16 hex digits (one path segment)"
        )
    return snapshot_id


def storage_full(exc: OSError, where: Path) -> SnapshotStorageFullError:
    return SnapshotStorageFullError(
        f"the disk holding snapshots ({where}) is full: {exc.strerror}. Nothing was stored and "
        "the sandbox is unchanged; delete old snapshots or set Snapshots.snapshot_dir "
        "to a larger disk"
    )


class SnapshotStore:
    """The snapshots of every owner under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def owner_dir(self, owner: str) -> Path:
        digest = hashlib.sha256(check_owner(owner).encode()).hexdigest()[:32]
        return self.root / digest

    def archive_path(self, owner: str, snapshot_id: str) -> Path:
        """The archive of ``owner``'s snapshot (SnapshotNotFoundError unless it exists)."""
        self.metadata(owner, snapshot_id)
        return self.owner_dir(owner) / f"{snapshot_id}.tar"

    def metadata(self, owner: str, snapshot_id: str) -> dict[str, Any]:
        path = self.owner_dir(owner) / f"{check_snapshot_id(snapshot_id)}.json"
        data = _read_json(path)
        if data is None or data.get("owner") != owner or data.get("id") != snapshot_id:
            raise SnapshotNotFoundError(f"no snapshot {snapshot_id}")
        if not path.with_suffix(".tar").is_file():
            raise SnapshotNotFoundError(f"no snapshot {snapshot_id} (its archive is missing)")
        return data

    def list(self, owner: str) -> list[dict[str, Any]]:
        """``owner``'s snapshots, oldest first; temporary files are never listed."""
        directory = self.owner_dir(owner)
        if not directory.is_dir():
            return []
        found = []
        for path in directory.glob("*.json"):
            if path.name.startswith(".") or not _SNAPSHOT_ID.match(path.stem):
                continue
            try:
                found.append(self.metadata(owner, path.stem))
            except SnapshotNotFoundError:
                continue
        return sorted(found, key=lambda m: (m.get("created", ""), m["id"]))

    def delete(self, owner: str, snapshot_id: str) -> None:
        self.metadata(owner, snapshot_id)
        directory = self.owner_dir(owner)
        # The metadata goes first: from then on the snapshot does not exist for anyone.
        (directory / f"{snapshot_id}.json").unlink(missing_ok=True)
        (directory / f"{snapshot_id}.tar").unlink(missing_ok=True)

    @contextlib.contextmanager
    def new_archive(self, owner: str) -> Iterator[tuple[IO[bytes], Path]]:
        """A temporary file in ``owner``'s directory to write an archive to, removed on error
        (and ENOSPC turned into SnapshotStorageFullError). :meth:`commit` makes it a snapshot."""
        directory = self.owner_dir(owner)
        try:
            make_private_dir(directory)
            fd, name = tempfile.mkstemp(dir=directory, prefix=TEMP_PREFIX, suffix=".tar")
        except OSError as exc:
            if exc.errno in _FULL:
                raise storage_full(exc, self.root) from None
            raise
        path = Path(name)
        try:
            with os.fdopen(fd, "w+b") as f, _early_writeback(fd):
                yield f, path
        except OSError as exc:
            path.unlink(missing_ok=True)
            if exc.errno in _FULL:
                raise storage_full(exc, self.root) from None
            raise
        except BaseException:
            path.unlink(missing_ok=True)
            raise

    def commit(self, owner: str, temporary: Path, metadata: dict[str, Any]) -> dict[str, Any]:
        """Move the written archive ``temporary`` into place with its metadata, atomically."""
        snapshot_id = check_snapshot_id(metadata["id"])
        directory = self.owner_dir(owner)
        metadata = {**metadata, "owner": owner}
        try:
            _fsync_path(temporary)
            os.replace(temporary, directory / f"{snapshot_id}.tar")
            _write_json_durably(directory / f"{snapshot_id}.json", metadata)
            _fsync_path(directory)
        except OSError as exc:
            temporary.unlink(missing_ok=True)
            (directory / f"{snapshot_id}.tar").unlink(missing_ok=True)
            if exc.errno in _FULL:
                raise storage_full(exc, self.root) from None
            raise SandboxError(f"storing snapshot {snapshot_id} failed: {exc}") from None
        return metadata

    def remove_stale_temporaries(self, owner: str, older_than: float = 3600.0) -> int:
        """Remove temporary files a crashed writer left (older than ``older_than`` seconds)."""
        directory = self.owner_dir(owner)
        removed = 0
        if not directory.is_dir():
            return 0
        limit = time.time() - older_than
        for path in directory.glob(f"{TEMP_PREFIX}*"):
            with contextlib.suppress(OSError):
                if path.stat().st_mtime < limit:
                    path.unlink()
                    removed += 1
        return removed


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_json_durably(path: Path, data: dict[str, Any]) -> None:
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=TEMP_PREFIX, suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(name, path)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def _early_writeback(fd: int) -> Iterator[None]:
    """While an archive is written to ``fd``, send what it holds to the disk every
    WRITEBACK_SECONDS on a thread of its own, so that the fsync of :meth:`SnapshotStore.commit`
    waits only for the last bytes instead of the whole archive (that fsync was a large part of
    a persist: docs/explanation/performance.md, "Figures behind the code"). Errors are left to the
    writer and the commit to see."""
    done = threading.Event()

    def flush() -> None:
        while not done.wait(WRITEBACK_SECONDS):
            try:
                os.fdatasync(fd)
            except OSError:
                return

    flusher = threading.Thread(target=flush, name="snapshot-writeback", daemon=True)
    flusher.start()
    try:
        yield
    finally:
        done.set()
        flusher.join()  # before the file is closed: never a sync of a reused descriptor


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
