"""Every kind of bad archive is refused on the host from its headers, naming member and rule;
good archives pass and come out clean (canonical names, no owners, safe modes)."""

from __future__ import annotations

import gzip
import io
import tarfile

import pytest

from jupyter_sandbox.protocol.snapshot_errors import ArchiveTooLargeError, UnsafeArchiveError
from jupyter_sandbox.sandbox.snapshots import archive_scan
from jupyter_sandbox.sandbox.snapshots.archive_scan import (
    ArchiveLimits,
    decompress_gzip,
    scan_archive,
    write_clean_archive,
)
from tests.sandbox.snapshots.archives import Member, huge_declared_file, tar_bytes

LIMITS = ArchiveLimits()

REFUSED = {
    "absolute path": ([Member("/etc/passwd", data=b"x")], "absolute-path", "/etc/passwd"),
    "parent traversal": ([Member("../escape.txt", data=b"x")], "parent-traversal", "../escape.txt"),
    "traversal inside": (
        [Member("a/../../escape.txt", data=b"x")],
        "parent-traversal",
        "a/../../escape.txt",
    ),
    "symlinked root": ([Member(".", "symlink", target="/")], "symlinked-root", "."),
    "member under a symlink": (
        [Member("link", "symlink", target="sub"), Member("link/etc/x", data=b"x")],
        "under-symlink",
        "link/etc/x",
    ),
    "member under an escaping symlink (link first)": (
        [Member("ok", "dir"), Member("ok/l", "symlink", target="../.."), Member("ok/l/x")],
        "link-escape",
        "ok/l",
    ),
    "symlink replacing a directory": (
        [Member("d/x", data=b"x"), Member("d", "symlink", target="e")],
        "under-symlink",
        "d",
    ),
    "absolute symlink target": (
        [Member("link", "symlink", target="/etc/passwd")],
        "link-absolute",
        "link",
    ),
    "symlink target leaving the root": (
        [Member("a/link", "symlink", target="../../x")],
        "link-escape",
        "a/link",
    ),
    "symlink escaping through another symlink": (
        [Member("here", "symlink", target="."), Member("out", "symlink", target="here/../x")],
        "link-escape",
        "out",
    ),
    "symlink loop": (
        [Member("a", "symlink", target="b/x"), Member("b", "symlink", target="a/y")],
        "link-loop",
        "a",
    ),
    "hardlink": ([Member("h", "hardlink", target="f")], "hardlink", "h"),
    "fifo": ([Member("pipe", "fifo")], "fifo", "pipe"),
    "character device": ([Member("null", "chr")], "device", "null"),
    "block device": ([Member("sda", "blk")], "device", "sda"),
    "duplicate": ([Member("f", data=b"1"), Member("./f", data=b"2")], "duplicate", "./f"),
    "windows separator": ([Member("a\\..\\x", data=b"x")], "windows-separator", "a\\..\\x"),
    "windows drive": ([Member("C:/Windows/x", data=b"x")], "windows-drive", "C:/Windows/x"),
    "windows symlink target": (
        [Member("l", "symlink", target="C:\\x")],
        "windows-separator",
        "l",
    ),
    "empty component": ([Member("a//b", data=b"x")], "non-canonical-path", "a//b"),
    "member under a file": (
        [Member("f", data=b"x"), Member("f/g", data=b"y")],
        "under-file",
        "f/g",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_with_member_and_rule(case: str) -> None:
    members, rule, name = REFUSED[case]
    with pytest.raises(UnsafeArchiveError) as refused:
        scan_archive(io.BytesIO(tar_bytes(*members)), LIMITS)
    assert refused.value.rule == rule
    assert refused.value.member == name
    assert repr(name) in refused.value.message
    assert rule in refused.value.message


def test_non_utf8_name_is_refused() -> None:
    info = tarfile.TarInfo("caf\udce9")  # the byte 0xe9 alone: not UTF-8
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        tar.addfile(info, io.BytesIO(b""))
    with pytest.raises(UnsafeArchiveError) as refused:
        scan_archive(io.BytesIO(out.getvalue()), LIMITS)
    assert refused.value.rule == "name-not-utf8"


def test_byte_cap() -> None:
    data = tar_bytes(Member("big", data=b"x" * 100_000))
    with pytest.raises(ArchiveTooLargeError) as refused:
        scan_archive(io.BytesIO(data), ArchiveLimits(max_bytes=50_000))
    assert refused.value.rule == "archive-bytes"


def test_member_cap() -> None:
    data = tar_bytes(*(Member(f"f{i}") for i in range(11)))
    with pytest.raises(ArchiveTooLargeError) as refused:
        scan_archive(io.BytesIO(data), ArchiveLimits(max_members=10))
    assert refused.value.rule == "member-count"
    assert refused.value.member == "f10"


def test_huge_declared_size_is_refused_from_the_header() -> None:
    # Declares 1 TiB and holds nothing: refused before any data is read or waited for.
    data = huge_declared_file("bomb", 1024**4)
    with pytest.raises(ArchiveTooLargeError) as refused:
        scan_archive(io.BytesIO(data), LIMITS)
    assert refused.value.rule == "expanded-bytes"
    assert refused.value.member == "bomb"


def test_compressed_archives_are_refused_unread() -> None:
    data = tar_bytes(Member("z", data=b"z" * 1000), compression="gz")
    with pytest.raises(UnsafeArchiveError) as refused:
        scan_archive(io.BytesIO(data), LIMITS)
    assert refused.value.rule == "compressed"
    assert "compression=gzip" in refused.value.message


def test_gzip_import_is_decompressed_within_the_ratio_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    # The cap applies past RATIO_FLOOR bytes written (64 MiB); lowered here to keep it quick.
    monkeypatch.setattr(archive_scan, "RATIO_FLOOR", 1024**2)
    zeros = [Member(f"z{i}", data=bytes(2 * 1024**2)) for i in range(3)]
    data = tar_bytes(*zeros, compression="gz")
    assert len(data) < 64 * 1024
    out = io.BytesIO()
    with pytest.raises(ArchiveTooLargeError) as refused:
        decompress_gzip(io.BytesIO(data), out, LIMITS)
    assert refused.value.rule == "compression-ratio"
    assert len(out.getvalue()) <= 2 * 1024**2  # stopped at the cap, one piece past it at most

    small = tar_bytes(Member("a.txt", data=b"a" * 5000), compression="gz")
    out = io.BytesIO()
    decompress_gzip(io.BytesIO(small), out, LIMITS)
    assert out.getvalue() == gzip.decompress(small)
    for broken in (small[:-10], small + b"more", b"not gzip at all"):
        with pytest.raises(UnsafeArchiveError) as unreadable:
            decompress_gzip(io.BytesIO(broken), io.BytesIO(), LIMITS)
        assert unreadable.value.rule == "not-gzip"


def test_not_a_tar_and_truncated() -> None:
    for data in (b"hello, not a tar" * 100, tar_bytes(Member("f", data=b"x" * 5000))[:1024]):
        with pytest.raises(UnsafeArchiveError) as refused:
            scan_archive(io.BytesIO(data), LIMITS)
        assert refused.value.rule == "not-a-tar"


def test_good_archive_passes_and_is_summarised() -> None:
    data = tar_bytes(
        Member(".", "dir", mode=0o700),
        Member("./docs", "dir", mode=0o755),
        Member("./docs/é ü.txt", data="ünïcode".encode()),
        Member("./docs/link", "symlink", target="é ü.txt"),
        Member("./up", "symlink", target="docs/../docs"),
        Member("./empty", "dir"),
        Member("./deep/er/file.bin", data=bytes(range(256))),
    )
    summary = scan_archive(io.BytesIO(data), LIMITS)
    assert summary.members == 7
    assert summary.file_bytes == len("ünïcode".encode()) + 256
    assert summary.size == len(data)
    assert summary.directories == ["deep", "deep/er", "docs", "empty"]
    import hashlib

    assert summary.sha256 == hashlib.sha256(data).hexdigest()


def test_external_links_allowed_when_configured() -> None:
    data = tar_bytes(Member("venv/bin/python", "symlink", target="/usr/local/bin/python3"))
    scan_archive(io.BytesIO(data), ArchiveLimits(allow_external_links=True))
    with pytest.raises(UnsafeArchiveError):
        scan_archive(io.BytesIO(data), LIMITS)
    under = tar_bytes(Member("l", "symlink", target="/etc"), Member("l/passwd", data=b"x"))
    with pytest.raises(UnsafeArchiveError) as refused:
        scan_archive(io.BytesIO(under), ArchiveLimits(allow_external_links=True))
    assert refused.value.rule == "under-symlink"


def test_clean_archive_drops_setuid_owners_and_the_root() -> None:
    data = tar_bytes(
        Member(".", "dir", mode=0o777),
        Member("./suid", data=b"#!/bin/sh\n", mode=0o4777),
        Member("./sgid-dir", "dir", mode=0o2777),
        Member("./private", data=b"p", mode=0o600),
    )
    out = io.BytesIO()
    summary = write_clean_archive(io.BytesIO(data), out, LIMITS)
    assert summary.sha256 == scan_archive(io.BytesIO(data), LIMITS).sha256
    out.seek(0)
    with tarfile.open(fileobj=out) as clean:
        modes = {m.name: (m.mode, m.uid, m.uname) for m in clean.getmembers()}
        assert clean.extractfile("suid").read() == b"#!/bin/sh\n"  # type: ignore[union-attr]
    assert modes == {"suid": (0o755, 0, ""), "sgid-dir": (0o755, 0, ""), "private": (0o600, 0, "")}
