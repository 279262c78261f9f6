"""The host's reading of workspace archives (snapshots/tar_reader.py, archive_rules.py,
archive_scan.py): what a sandbox's tar or an uploader sends to POST /api/snapshots.

The input is an archive as posted: a plain tar, or (starting with gzip's magic) a gzip one,
decompressed first as an import with ``compression=gzip`` is. Every refusal is an
UnsafeArchiveError (ArchiveTooLargeError included), which the server answers with a 400 or 413;
any other exception would be a 500. An archive that passes must come out as a clean archive
that reads back, by the same reader and by tarfile, with the members admitted.
"""

from __future__ import annotations

import io
import tarfile

from jupyter_sandbox.protocol.snapshot_errors import UnsafeArchiveError
from jupyter_sandbox.sandbox.snapshots.archive_scan import (
    ArchiveLimits,
    decompress_gzip,
    write_clean_archive,
)
from jupyter_sandbox.sandbox.snapshots.tar_reader import read_members

# Archives need three 512-byte blocks at least; long names and pax headers a few more.
MAX_LEN = 16384
# Small caps, so that a short input reaches them too; the deadline is far below the fuzzer's
# per-input timeout, so a slow input is a refusal here and a hang only if the deadline fails.
LIMITS = ArchiveLimits(
    max_bytes=1024**2, max_members=64, max_expanded_bytes=1024**2, max_seconds=2.0
)
GZIP_MAGIC = b"\x1f\x8b"


def fuzz_one_input(data: bytes) -> None:
    try:
        if data.startswith(GZIP_MAGIC):
            plain = io.BytesIO()
            decompress_gzip(io.BytesIO(data), plain, LIMITS)
            data = plain.getvalue()
        clean = io.BytesIO()
        summary = write_clean_archive(io.BytesIO(data), clean, LIMITS)
    except UnsafeArchiveError:
        return
    written = clean.getvalue()
    members = list(read_members(io.BytesIO(written), len(written)))
    with tarfile.open(fileobj=io.BytesIO(written), mode="r:") as reference:
        names = [info.name for info in reference.getmembers()]
    # tarfile drops a directory's trailing '/', which this reader leaves to the rules
    assert [info.name.removesuffix("/") for info in members] == names
    # The root ('.') is admitted but never written: it keeps its owner and mode.
    assert len(names) in (summary.members, summary.members - 1)
    assert all(not name.startswith(("/", "../")) and name != ".." for name in names)
