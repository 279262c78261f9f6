"""The host's own reader of tar headers (tar_reader.py): strict, capped before reading, linear.

Each hostile header of issue 31 is refused from its 512-byte header, before its data is read
(a reader counting the bytes asked for shows it); archives GNU tar writes in its formats read
as they did with tarfile; what an error says of a name is bounded and printable.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from jupyter_sandbox.protocol.snapshot_errors import ArchiveTooLargeError, UnsafeArchiveError
from jupyter_sandbox.sandbox.snapshots import archive_rules
from jupyter_sandbox.sandbox.snapshots.archive_scan import (
    ArchiveLimits,
    scan_archive,
    write_clean_archive,
)
from jupyter_sandbox.sandbox.snapshots.tar_reader import MAX_PAX_HEADER
from tests.sandbox.snapshots.archives import Member, tar_bytes

LIMITS = ArchiveLimits()
END = bytes(1024)


def header(
    name: bytes,
    kind: bytes = b"0",
    size: int = 0,
    *,
    size_field: bytes | None = None,
    mtime_field: bytes = b"00000000000\x00",
    checksum_delta: int = 0,
) -> bytes:
    """One POSIX ustar header, its checksum computed (plus ``checksum_delta``)."""
    block = bytearray(512)
    block[0 : len(name)] = name
    block[100:108] = b"0000644\x00"
    block[108:116] = block[116:124] = b"0001750\x00"
    block[124:136] = size_field if size_field is not None else b"%011o\x00" % size
    block[136:148] = mtime_field
    block[148:156] = b" " * 8
    block[156:157] = kind
    block[257:265] = b"ustar\x0000"
    block[148:156] = b"%06o\x00 " % (sum(block) + checksum_delta)
    return bytes(block)


def padded(data: bytes) -> bytes:
    return data + bytes(-len(data) % 512)


def pax(*records: bytes) -> bytes:
    """A pax header's data of ``key=value`` records, each with its right length."""
    out = b""
    for record in records:
        body = b" " + record + b"\n"
        length = len(body) + 1
        while len(body) + len(str(length)) != length:  # the length counts its own digits
            length = len(body) + len(str(length))
        out += str(length).encode() + body
    return out


def member(name: bytes, data: bytes = b"") -> bytes:
    return header(name, size=len(data)) + padded(data)


class CountingReader(io.BytesIO):
    """Bytes in memory that remember the largest single read asked of them."""

    largest_read = 0

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        self.largest_read = max(self.largest_read, len(data))
        return data


def refused(data: bytes, rule: str, *, cls: type[UnsafeArchiveError] = UnsafeArchiveError) -> str:
    reader = CountingReader(data)
    with pytest.raises(cls) as error:
        scan_archive(reader, LIMITS)
    assert error.value.rule == rule, error.value.message
    assert reader.largest_read <= 512, "refused after reading more than a header"
    return error.value.message


def test_a_pax_header_over_the_cap_is_refused_before_it_is_read() -> None:
    # issue 31: 150 KB of pax records froze a server for 17.7 s in tarfile's regex
    records = pax(b"path=" + b"0 " * 75_000)
    assert len(records) > MAX_PAX_HEADER
    data = header(b"PaxHeader", b"x", len(records)) + padded(records) + member(b"f") + END
    message = refused(data, "header-too-large")
    assert str(MAX_PAX_HEADER) in message


def test_a_huge_gnu_long_name_is_refused_before_it_is_read() -> None:
    # issue 31: a 400 MB long name took a server from 93 MB to 3.2 GB; this one is not even
    # there: the header alone is refused
    data = header(b"././@LongLink", b"L", 400 * 1024**2) + bytes(4096)
    refused(data, "name-too-long")
    refused(header(b"././@LongLink", b"K", 10**6) + bytes(4096), "name-too-long")


@pytest.mark.parametrize(
    "field",
    [
        b"0000000001\xd9\x00",  # an Arabic-Indic digit
        b"00000000018\x00",  # not octal
        b"+0000000001\x00",
        b"0000 000001\x00",  # a space inside the digits
        b"00000000001x",
    ],
)
def test_numeric_fields_are_ascii_octal_only(field: bytes) -> None:
    refused(header(b"f", size_field=field) + END, "not-a-tar")


def test_the_checksum_is_verified() -> None:
    assert scan_archive(io.BytesIO(member(b"f", b"x") + END), LIMITS).members == 1
    refused(header(b"f", checksum_delta=1) + END, "not-a-tar")


def test_a_header_without_a_tar_magic_is_refused() -> None:
    block = bytearray(header(b"f"))
    block[257:265] = bytes(8)
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\x00 " % sum(block)
    refused(bytes(block) + END, "not-a-tar")


@pytest.mark.parametrize(
    "records",
    [
        pax(b"path=a", b"path=b"),  # a key twice
        pax(b"size=12x"),
        pax(b"size=\xd9\xa1"),  # a non-ASCII digit
        pax(b"mtime=1e9"),
        b"5 a=b\n",  # a length that does not match
        b"99999999999999999999999 a=b\n",
        b"x a=b\n",
        pax(b"=novalue"),
        pax(b"path=a") + b"\x00\x00garbage",
    ],
)
def test_malformed_pax_records_are_refused(records: bytes) -> None:
    data = header(b"PaxHeader", b"x", len(records)) + padded(records) + member(b"f") + END
    with pytest.raises(UnsafeArchiveError) as error:
        scan_archive(io.BytesIO(data), LIMITS)
    assert error.value.rule == "not-a-tar"


def test_extended_headers_come_one_of_each_per_member() -> None:
    one = pax(b"path=a")
    twice = (header(b"P", b"x", len(one)) + padded(one)) * 2 + member(b"f") + END
    long_name = header(b"././@LongLink", b"L", 2) + padded(b"b\x00")
    both = header(b"P", b"x", len(one)) + padded(one) + long_name + member(b"f") + END
    for data in (twice, long_name * 2 + member(b"f") + END, both):
        with pytest.raises(UnsafeArchiveError) as error:
            scan_archive(io.BytesIO(data), LIMITS)
        assert error.value.rule == "not-a-tar"
    dangling = header(b"P", b"x", len(one)) + padded(one) + END
    with pytest.raises(UnsafeArchiveError):
        scan_archive(io.BytesIO(dangling), LIMITS)


def test_sparse_members_are_refused_whichever_way_they_are_written() -> None:
    records = pax(b"GNU.sparse.major=1", b"GNU.sparse.minor=0", b"GNU.sparse.name=s")
    posix = header(b"P", b"x", len(records)) + padded(records) + member(b"s") + END
    gnu = header(b"s", b"S") + END
    for data in (posix, gnu):
        with pytest.raises(UnsafeArchiveError) as error:
            scan_archive(io.BytesIO(data), LIMITS)
        assert error.value.rule == "sparse-file"


def test_a_directory_with_data_is_refused() -> None:
    refused(header(b"d/", b"5", 512) + bytes(512) + END, "not-a-tar")


def test_base_256_and_pax_times_are_read() -> None:
    negative = (-(2**40)).to_bytes(12, "big", signed=True)
    data = header(b"old", mtime_field=negative) + END
    records = pax(b"mtime=1700000000.123456789", b"path=" + "é".encode() * 100)
    data_pax = header(b"P", b"x", len(records)) + padded(records) + member(b"x") + END
    assert scan_archive(io.BytesIO(data), LIMITS).members == 1
    out = io.BytesIO()
    write_clean_archive(io.BytesIO(data_pax), out, LIMITS)
    out.seek(0)
    with tarfile.open(fileobj=out) as clean:
        (info,) = clean.getmembers()
    assert (info.name, info.mtime) == ("é" * 100, 1700000000)


def test_global_pax_headers_are_read_and_ignored() -> None:
    # git archive writes one (a comment holding the commit)
    records = pax(b"comment=0123456789abcdef")
    data = header(b"pax_global_header", b"g", len(records)) + padded(records)
    summary = scan_archive(io.BytesIO(data + member(b"f", b"y") + END), LIMITS)
    assert summary.members == 1


@pytest.mark.parametrize("fmt", ["gnu", "posix", "ustar", "oldgnu"])
def test_archives_gnu_tar_writes_read_as_before(tmp_path: Path, fmt: str) -> None:
    root = tmp_path / "w"
    # Past ustar's 100-byte name field (a prefix, a GNU long name or a pax path), within its
    # 155-byte prefix: the four formats can all hold it.
    deep = root / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    (deep / ("f" * 80)).write_bytes(b"long")
    (root / "link").symlink_to("d" * 60)
    (root / "é").write_text("ü")
    archive = tmp_path / "a.tar"
    subprocess.run(
        ["/usr/bin/tar", f"--format={fmt}", "-cf", str(archive), "-C", str(root), "."],
        check=True,
    )
    data = archive.read_bytes()
    summary = scan_archive(io.BytesIO(data), LIMITS)
    with tarfile.open(fileobj=io.BytesIO(data)) as reference:
        expected = reference.getmembers()
    assert summary.members == len(expected)
    out = io.BytesIO()
    write_clean_archive(io.BytesIO(data), out, LIMITS)
    out.seek(0)
    with tarfile.open(fileobj=out) as clean:
        names = {m.name: (m.type, m.linkname, m.size) for m in clean.getmembers()}
        content = clean.extractfile(f"{'d' * 60}/{'e' * 60}/{'f' * 80}")
        assert content is not None
        assert content.read() == b"long"
    assert names == {
        m.name.removeprefix("./"): (m.type, m.linkname, m.size) for m in expected if m.name != "."
    }


def test_errors_show_a_bounded_printable_name() -> None:
    # issue 31: the 400 answer echoed a whole 400 MB name; a sandbox's name may also hold
    # terminal escapes
    name = "\x1b]0;owned\x07" + "n" * 3000 + "/../x"
    data = tar_bytes(Member(name, data=b"x"))
    with pytest.raises(UnsafeArchiveError) as error:
        scan_archive(io.BytesIO(data), LIMITS)
    assert error.value.rule == "parent-traversal"
    for text in (error.value.message, error.value.member):
        assert len(text) < 400
        assert "\x1b" not in text
        assert "\x07" not in text
        assert text.isprintable()
    assert f"({len(name)} characters)" in error.value.member


def test_the_names_memory_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    # 100,000 deep 4 KiB paths would hold gigabytes of directory names; capped (lowered here)
    monkeypatch.setattr(archive_rules, "MAX_NAME_BYTES", 200_000)
    members = [Member(f"top{i}/" + "/".join("abcdefghij" * 10), data=b"") for i in range(200)]
    with pytest.raises(ArchiveTooLargeError) as error:
        scan_archive(io.BytesIO(tar_bytes(*members)), LIMITS)
    assert error.value.rule == "name-bytes"


def test_following_links_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(archive_rules, "MAX_LINK_STEPS", 5_000)
    chain = [Member("l0", "symlink", target="/".join(["."] * 1000))]
    chain += [Member(f"l{i}", "symlink", target=f"l{i - 1}") for i in range(1, 30)]
    with pytest.raises(ArchiveTooLargeError) as error:
        scan_archive(io.BytesIO(tar_bytes(*chain)), LIMITS)
    assert error.value.rule == "link-steps"


def test_the_deadline_bounds_a_scan() -> None:
    data = tar_bytes(*(Member(f"f{i}") for i in range(10)))
    with pytest.raises(ArchiveTooLargeError) as error:
        scan_archive(io.BytesIO(data), ArchiveLimits(max_seconds=1e-9))
    assert error.value.rule == "scan-time"
