"""Reading a workspace archive on the host, within caps, without extracting anything.

:func:`scan_archive` reads a tar stream once (plain, or gzip/bzip2/xz compressed), checks every
member against :class:`~.archive_rules.ArchiveRules` and the caps of :class:`ArchiveLimits`, and
hashes the raw bytes. :func:`write_clean_archive` reads the same stream again and writes a new,
plain tar of exactly the admitted members with canonical names, owners dropped and modes
stripped of setuid/setgid/sticky/write-for-others bits. That clean archive is the only thing a
sandbox ever unpacks: GNU tar in the sandbox never parses bytes this module did not write, so
differences between Python's and GNU tar's readings of odd headers (the class of
CVE-2025-4517) cannot be reached.

The caps bound the work: the raw bytes read, the member count, and the bytes the members
declare (checked from each header before its data is read), and for compressed input the
ratio of those to the raw bytes.
"""

from __future__ import annotations

import hashlib
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any, cast

from .archive_rules import ROOT, ArchiveRules, safe_mode
from .errors import ArchiveTooLargeError, UnsafeArchiveError

# What one tar header block costs in the expansion count.
HEADER_BYTES = 512
# Compressed archives may expand this many times before the ratio cap applies...
MAX_RATIO = 100
# ...once they declare more than this many bytes (small archives of zeros are fine).
RATIO_FLOOR = 64 * 1024**2
CHUNK = 1024**2


@dataclass(frozen=True)
class ArchiveLimits:
    """Caps of one archive (0 = no cap)."""

    max_bytes: int = 2 * 1024**3  # raw bytes of the archive as stored or uploaded
    max_members: int = 100_000
    max_expanded_bytes: int = 4 * 1024**3  # sum of the members' declared sizes and headers
    allow_external_links: bool = False


@dataclass
class ArchiveSummary:
    """What a scan found: the raw bytes' sha256 and size, and the members' totals."""

    sha256: str = ""
    size: int = 0
    members: int = 0
    file_bytes: int = 0  # bytes of regular files: what the workspace will hold
    expanded_bytes: int = 0
    directories: list[str] = field(default_factory=list)  # every directory the archive makes


class _CountingReader:
    """The raw stream as tarfile reads it: hashed, counted and cut off at the byte cap."""

    def __init__(self, raw: IO[bytes], max_bytes: int) -> None:
        self.raw = raw
        self.max_bytes = max_bytes
        self.hash = hashlib.sha256()
        self.count = 0

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size if size >= 0 else CHUNK)
        self.count += len(data)
        if self.max_bytes and self.count > self.max_bytes:
            raise ArchiveTooLargeError(
                "", "archive-bytes", f"the archive is larger than {self.max_bytes} bytes"
            )
        self.hash.update(data)
        return data

    def drain(self) -> None:
        """Read to the end (bytes after the tar's end marker count and are hashed too)."""
        while self.read(CHUNK):
            pass


def _members(
    reader: _CountingReader, limits: ArchiveLimits, summary: ArchiveSummary
) -> Iterator[tuple[tarfile.TarFile, tarfile.TarInfo, str, str]]:
    """Each admitted member with its canonical name and kind, in archive order."""
    rules = ArchiveRules(allow_external_links=limits.allow_external_links)
    try:
        with tarfile.open(fileobj=cast(Any, reader), mode="r|*") as tar:
            for info in tar:
                _check_caps(info, reader, limits, summary)
                name, kind = rules.admit(info)
                if kind == "file":
                    summary.file_bytes += info.size
                yield tar, info, name, kind
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise UnsafeArchiveError("", "not-a-tar", f"not a readable tar archive ({exc})") from None
    _check_ratio(reader, limits, summary)
    rules.finish()
    reader.drain()
    summary.sha256 = reader.hash.hexdigest()
    summary.size = reader.count
    summary.directories = sorted(d for d in rules.implied_dirs | _dirs(rules) if d != ROOT)


def _dirs(rules: ArchiveRules) -> set[str]:
    return {name for name, kind in rules.kinds.items() if kind == "dir"}


def _check_caps(
    info: tarfile.TarInfo, reader: _CountingReader, limits: ArchiveLimits, summary: ArchiveSummary
) -> None:
    # The members before this one are read by now: their expansion is known.
    _check_ratio(reader, limits, summary)
    summary.members += 1
    if limits.max_members and summary.members > limits.max_members:
        raise ArchiveTooLargeError(
            info.name, "member-count", f"the archive has more than {limits.max_members} members"
        )
    summary.expanded_bytes += info.size + HEADER_BYTES
    if limits.max_expanded_bytes and summary.expanded_bytes > limits.max_expanded_bytes:
        raise ArchiveTooLargeError(
            info.name,
            "expanded-bytes",
            f"the members declare more than {limits.max_expanded_bytes} bytes in all",
        )


def _check_ratio(reader: _CountingReader, limits: ArchiveLimits, summary: ArchiveSummary) -> None:
    expanded = summary.expanded_bytes
    if expanded > RATIO_FLOOR and expanded > MAX_RATIO * max(reader.count, 1):
        raise ArchiveTooLargeError(
            "",
            "compression-ratio",
            f"the archive expands more than {MAX_RATIO} times ({reader.count} bytes declare "
            f"{expanded})",
        )


def scan_archive(raw: IO[bytes], limits: ArchiveLimits) -> ArchiveSummary:
    """Check every member of the archive read from ``raw`` (UnsafeArchiveError if any fails)."""
    summary = ArchiveSummary()
    reader = _CountingReader(raw, limits.max_bytes)
    for _tar, _info, _name, _kind in _members(reader, limits, summary):
        pass  # tarfile skips each member's data as the next header is read
    return summary


def write_clean_archive(
    raw: IO[bytes], out: Any, limits: ArchiveLimits, on_summary: Callable[[ArchiveSummary], None]
) -> None:
    """Write to ``out`` a plain tar of the admitted members of ``raw``, cleaned (see above).

    Call it on an archive :func:`scan_archive` passed: a member that fails here has had the
    members before it written already. ``on_summary`` gets the second reading's summary, so
    the caller can check that its sha256 is the one the scan saw.
    """
    summary = ArchiveSummary()
    reader = _CountingReader(raw, limits.max_bytes)
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as clean:
        for tar, info, name, kind in _members(reader, limits, summary):
            if name == ROOT:
                continue  # /workspace itself keeps its own owner and mode
            clean.addfile(*_clean_member(tar, info, name, kind))
    on_summary(summary)


def _clean_member(
    tar: tarfile.TarFile, info: tarfile.TarInfo, name: str, kind: str
) -> tuple[tarfile.TarInfo, IO[bytes] | None]:
    member = tarfile.TarInfo(name)
    member.mode = safe_mode(info.mode)
    member.mtime = int(info.mtime) if info.mtime >= 0 else 0
    member.uid = member.gid = 0
    member.uname = member.gname = ""
    if kind == "dir":
        member.type = tarfile.DIRTYPE
        return member, None
    if kind == "symlink":
        member.type = tarfile.SYMTYPE
        member.linkname = info.linkname
        return member, None
    member.type = tarfile.REGTYPE
    member.size = info.size
    return member, tar.extractfile(info)
