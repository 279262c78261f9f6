"""Reading a workspace archive on the host, within caps, without extracting anything.

:func:`scan_archive` reads a plain tar file once (tar_reader.py: a strict reader of its headers,
bounded in time and memory; compressed archives are refused, :func:`decompress_gzip` is for an
import that asks for gzip), checks every member against :class:`~.archive_rules.ArchiveRules` and
the caps of :class:`ArchiveLimits`, and hashes the raw bytes. :func:`write_clean_archive` does the
same and also writes a new, plain tar of exactly the admitted members with canonical names, owners
dropped and modes stripped of setuid/setgid/sticky/write-for-others bits. That clean archive is the
only thing a sandbox ever unpacks: GNU tar in the sandbox never parses bytes this module did not
write, so differences between Python's and GNU tar's readings of odd headers (the class of
CVE-2025-4517) cannot be reached.

Archives are seekable files (a stored snapshot, a private copy, bytes in memory): the reader
reads the headers and seeks over the data, and the sha256 of the raw bytes is computed on a second
thread with ``pread`` (hashlib releases the GIL), so a scan costs about one hash of the file.
tarfile's stream mode, which this replaced, read everything in small pieces and copied each
several times, which was several times slower
(benchmarks/snapshots.py; figures: docs/explanation/performance.md, "Figures behind the code").

The caps bound the work: the raw size (known before anything is parsed), the member count, the
bytes the members declare (checked from each header before its data is read), the headers'
own sizes and the names' memory (tar_reader.py, archive_rules.py), and a deadline on the whole
reading (``ArchiveLimits.max_seconds``: Snapshots.timeout). Scans run on a worker thread, never
on the server's event loop; every step is linear and capped, so a hostile header is refused in
microseconds and holds the interpreter's lock no longer than any other request's work (security
row 40 times another user's request beside such scans).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import tarfile
import threading
import time
import zlib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import IO, Any, cast

from jupyter_sandbox.protocol.snapshot_errors import ArchiveTooLargeError, UnsafeArchiveError
from jupyter_sandbox.sandbox.snapshots.archive_rules import ROOT, ArchiveRules, safe_mode
from jupyter_sandbox.sandbox.snapshots.tar_reader import check_data_present, read_members

# What one tar header block costs in the expansion count.
HEADER_BYTES = 512
# A gzip import (decompress_gzip) may expand this many times before the ratio cap applies...
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
    # One reading of the archive (its scan, or its scan and clean copy): Snapshots.timeout.
    # 120 MiB of 20,000 files took 4 s to scan and 15 s to copy clean on the 2-core CI machine
    # under a load of 15; a hostile archive within the other caps takes less.
    max_seconds: float = 600.0


@dataclass
class ArchiveSummary:
    """What a scan found: the raw bytes' sha256 and size, and the members' totals."""

    sha256: str = ""
    size: int = 0
    members: int = 0
    file_bytes: int = 0  # bytes of regular files: what the workspace will hold
    expanded_bytes: int = 0
    directories: list[str] = field(default_factory=list)  # every directory the archive makes


def scan_archive(
    raw: IO[bytes], limits: ArchiveLimits, *, sha256: str | None = None
) -> ArchiveSummary:
    """Check every member of the seekable archive ``raw`` (UnsafeArchiveError if any fails).

    ``sha256``: the raw bytes' hash when the caller computed it as it wrote them (persist
    does, while copying them out of the sandbox); then only the headers are read here.
    """
    return _read(raw, limits, None, sha256)


def write_clean_archive(raw: IO[bytes], out: Any, limits: ArchiveLimits) -> ArchiveSummary:
    """Check ``raw`` as :func:`scan_archive` does and write its clean archive to ``out`` (any
    object with ``write``) in the same reading; returns that reading's summary.

    A member that fails has had the members before it written already: unpack ``out`` only
    after this returned (and its sha256 is the one expected), or after a scan passed.
    """
    return _read(raw, limits, out)


def _read(
    raw: IO[bytes], limits: ArchiveLimits, out: Any, sha256: str | None = None
) -> ArchiveSummary:
    summary = ArchiveSummary(size=_size(raw))
    if limits.max_bytes and summary.size > limits.max_bytes:
        raise ArchiveTooLargeError(
            "", "archive-bytes", f"the archive is larger than {limits.max_bytes} bytes"
        )
    if sha256 is not None:
        _check_and_copy(raw, limits, summary, out)
        summary.sha256 = sha256
        return summary
    stop = threading.Event()  # a refused archive need not be hashed to its end
    with ThreadPoolExecutor(1, thread_name_prefix="archive-sha256") as pool:
        digest = pool.submit(_sha256, raw, summary.size, stop)
        try:
            _check_and_copy(raw, limits, summary, out)
        except BaseException:
            stop.set()
            raise
        summary.sha256 = _result(digest)
    return summary


def _check_and_copy(
    raw: IO[bytes], limits: ArchiveLimits, summary: ArchiveSummary, out: Any
) -> None:
    rules = ArchiveRules(allow_external_links=limits.allow_external_links)
    deadline = time.monotonic() + limits.max_seconds if limits.max_seconds else None
    try:
        with contextlib.ExitStack() as stack:
            clean = None
            if out is not None:
                # Closed (end-of-archive blocks written) only when every member passed. Only
                # writing uses tarfile: what it writes is this module's, never the input.
                writer = cast(Any, _Counted(out))
                clean = stack.enter_context(
                    tarfile.TarFile(
                        fileobj=writer, mode="w", format=tarfile.PAX_FORMAT, copybufsize=CHUNK
                    )
                )
            members = read_members(raw, summary.size, deadline)
            for info in _members(members, limits, summary):
                name, kind = rules.admit(info)
                if kind == "file":
                    summary.file_bytes += info.size
                if clean is not None and name != ROOT:  # /workspace keeps its owner and mode
                    clean.addfile(*_clean_member(raw, info, name, kind))
            rules.finish()
    except _OutputFailed as failed:  # the writing side's error is the caller's to report
        raise failed.error from None
    except OSError as exc:
        raise UnsafeArchiveError("", "not-a-tar", f"not a readable tar archive ({exc})") from None
    summary.directories = sorted(d for d in rules.implied_dirs | _dirs(rules) if d != ROOT)


def _members(
    members: Iterator[tarfile.TarInfo], limits: ArchiveLimits, summary: ArchiveSummary
) -> Iterator[tarfile.TarInfo]:
    """Each member in archive order, its caps checked from its header."""
    for info in members:
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
        check_data_present(info, summary.size)
        yield info


def _size(raw: IO[bytes]) -> int:
    raw.seek(0, io.SEEK_END)
    size = raw.tell()
    raw.seek(0)
    return size


def _sha256(raw: IO[bytes], size: int, stop: threading.Event) -> str:
    """The sha256 of ``raw``'s first ``size`` bytes, without moving its position (the other
    thread is reading it): pread on a file, the buffer of bytes in memory."""
    digest = hashlib.sha256()
    if isinstance(raw, io.BytesIO):
        digest.update(raw.getbuffer()[:size])
        return digest.hexdigest()
    fd = raw.fileno()
    offset = 0
    while offset < size and not stop.is_set():
        chunk = os.pread(fd, min(CHUNK, size - offset), offset)
        if not chunk:
            raise UnsafeArchiveError("", "not-a-tar", "the archive shrank while it was read")
        digest.update(chunk)
        offset += len(chunk)
    return digest.hexdigest()


def _result(digest: Future[str]) -> str:
    try:
        return digest.result()
    except OSError as exc:
        raise UnsafeArchiveError("", "not-a-tar", f"the archive is unreadable ({exc})") from None


def _dirs(rules: ArchiveRules) -> set[str]:
    return {name for name, kind in rules.kinds.items() if kind == "dir"}


class _OutputFailed(Exception):
    """Writing the clean archive failed (a full disk, tar gone): not the archive's fault."""

    def __init__(self, error: OSError) -> None:
        self.error = error


class _Counted:
    """``out`` as tarfile's writer wants it (``tell`` too), whatever ``out`` is."""

    def __init__(self, out: Any) -> None:
        self.out = out
        self.offset = 0

    def write(self, data: bytes) -> int:
        try:
            self.out.write(data)
        except OSError as exc:
            raise _OutputFailed(exc) from exc
        self.offset += len(data)
        return len(data)

    def tell(self) -> int:
        return self.offset


def _clean_member(
    raw: IO[bytes], info: tarfile.TarInfo, name: str, kind: str
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
    raw.seek(info.offset_data)  # tarfile copies exactly member.size bytes from here
    return member, raw


def decompress_gzip(source: IO[bytes], out: IO[bytes], limits: ArchiveLimits) -> None:
    """Write the plain tar that the gzip stream ``source`` holds to ``out``, a piece at a
    time: never more than CHUNK bytes of output in memory, at most ``limits.max_bytes`` of it,
    and past RATIO_FLOOR bytes at most MAX_RATIO times what was read. One gzip member only
    (bytes after it are refused). Only for an import that asked for gzip: scanning never
    decompresses."""
    inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # gzip header and trailer
    read = written = 0

    def emit(data: bytes) -> None:
        nonlocal written
        written += len(data)
        if limits.max_bytes and written > limits.max_bytes:
            raise ArchiveTooLargeError(
                "", "archive-bytes", f"the archive is larger than {limits.max_bytes} bytes"
            )
        if written > RATIO_FLOOR and written > MAX_RATIO * max(read, 1):
            raise ArchiveTooLargeError(
                "",
                "compression-ratio",
                f"the archive expands more than {MAX_RATIO} times ({read} bytes give {written})",
            )
        out.write(data)

    try:
        while not inflate.eof:
            chunk = source.read(CHUNK)
            read += len(chunk)
            pending = chunk
            while True:
                data = inflate.decompress(pending, CHUNK)
                emit(data)
                pending = inflate.unconsumed_tail
                # A full piece may leave output inside zlib even with no input left: ask again.
                if inflate.eof or (not pending and len(data) < CHUNK):
                    break
            if not chunk and not inflate.eof:
                raise UnsafeArchiveError("", "not-gzip", "the gzip stream is truncated")
        if inflate.unused_data or source.read(1):
            raise UnsafeArchiveError("", "not-gzip", "bytes follow the gzip stream")
    except zlib.error as exc:
        raise UnsafeArchiveError("", "not-gzip", f"not a readable gzip stream ({exc})") from None
