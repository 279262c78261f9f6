"""A strict reader of the tar header stream, bounded in time and memory whatever the input.

The host reads archives that a sandbox or a user made: every byte is hostile. The standard
library's ``tarfile`` is not used to read them: it reads pax and GNU long-name headers whole
into memory before any cap applies (a small gzip declaring a huge long name takes a server's
memory), and its pax parsing is quadratic on some Pythons (CVE-2024-6232: a small header
freezes a server; the figures: docs/explanation/performance.md, "Figures behind the code"). This
reader:

* reads plain tar only: no decompression (a compressed archive is refused, saying so; an
  import that asks for gzip is decompressed before, with caps: service.py);
* checks each 512-byte header before using it: its checksum, one of the two magics GNU tar and
  Python write (POSIX ``ustar\\0 00``, GNU ``ustar  \\0``), numeric fields of ASCII octal digits
  only (or GNU's base-256), no data on members that have none;
* caps every header that carries data before reading it: a pax header at
  :data:`MAX_PAX_HEADER` bytes, a GNU long name or link at the longest path the rules accept;
* parses pax records in one pass: ASCII decimal lengths, each key once, the keys it uses
  (``path``, ``linkpath``, ``size``, ``mtime``) with strict values, any ``GNU.sparse`` key
  refused (sparse files are not restored); at most one pax header and one GNU long name and
  link before a member;
* never reads past the archive's known size, and seeks over the members' data.

It yields :class:`tarfile.TarInfo` records (only as data: ``offset_data`` set) so that the
rules (archive_rules.py) and the clean archive's writer see what they saw before. Its cost is
linear in the bytes of the headers, each header bounded, so a scan's time and memory are
bounded by the member cap and these caps; archive_scan.py adds a deadline.
"""

from __future__ import annotations

import re
import struct
import tarfile
import time
from collections.abc import Iterator
from typing import IO

from jupyter_sandbox.protocol.snapshot_errors import ArchiveTooLargeError, UnsafeArchiveError, shown
from jupyter_sandbox.sandbox.snapshots.archive_rules import MAX_PATH

BLOCK = 512
ZERO_BLOCK = bytes(BLOCK)
# GNU tar writes pax headers of a few hundred bytes (a long name, times with fractions); 64 KiB
# leaves room for any name the rules accept and many keys, and bounds a header's memory.
MAX_PAX_HEADER = 64 * 1024
# A GNU long name or link is a path NUL-terminated: longer than this is refused anyway.
MAX_LONG_NAME = MAX_PATH + 1
# The lengths written in pax records: 20 digits is far past any header allowed here.
MAX_PAX_LENGTH_DIGITS = 20

POSIX_MAGIC = b"ustar\x0000"
GNU_MAGIC = b"ustar  \x00"
# How compressed archives start: refused with a message saying so, not as "not a tar".
COMPRESSED_MAGICS = {
    b"\x1f\x8b": "gzip",
    b"BZh": "bzip2",
    b"\xfd7zXZ\x00": "xz",
    b"\x28\xb5\x2f\xfd": "zstd",
}
# The member types the rules know (archive_rules.member_kind); others are refused there.
MEMBER_TYPES = frozenset(
    {
        tarfile.REGTYPE,
        tarfile.AREGTYPE,
        tarfile.LNKTYPE,
        tarfile.SYMTYPE,
        tarfile.CHRTYPE,
        tarfile.BLKTYPE,
        tarfile.DIRTYPE,
        tarfile.FIFOTYPE,
        tarfile.CONTTYPE,
    }
)
_WITH_DATA = frozenset({tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE})
_OCTAL = re.compile(rb" *([0-7]*)[ \x00]*")
_PAX_MTIME = re.compile(rb"(-?[0-9]{1,20})(?:\.[0-9]{0,30})?")
_DECIMAL = re.compile(rb"[0-9]{1,20}")
_SIGNED_HEADER = struct.Struct("148b8x356b")


def not_a_tar(detail: str, member: str = "") -> UnsafeArchiveError:
    return UnsafeArchiveError(member, "not-a-tar", f"not a readable tar archive ({detail})")


def refuse_compressed(head: bytes) -> None:
    """UnsafeArchiveError when ``head`` (the archive's first bytes) is a compressed stream."""
    for magic, kind in COMPRESSED_MAGICS.items():
        if head.startswith(magic):
            raise UnsafeArchiveError(
                "",
                "compressed",
                f"the archive is {kind}-compressed; only plain tar is read: decompress it "
                "first, or import it with compression 'gzip' (POST /api/snapshots"
                "?compression=gzip)"
                if kind == "gzip"
                else f"the archive is {kind}-compressed; only plain tar is read: decompress it "
                "first",
            )


def read_members(
    raw: IO[bytes], size: int, deadline: float | None = None
) -> Iterator[tarfile.TarInfo]:
    """Each member of the plain tar ``raw`` (seekable, ``size`` bytes), in archive order.

    ``deadline`` (time.monotonic()): past it, ArchiveTooLargeError (rule ``scan-time``). The
    caller may read a member's data (``offset_data``, ``size``) before asking for the next:
    each header is read after seeking to it. A member whose data runs past ``size`` is refused
    when the next is asked for: the caller checks that too before reading the data
    (:func:`check_data_present`).
    """
    raw.seek(0)
    refuse_compressed(raw.read(8))
    if size < BLOCK:
        raise not_a_tar("it is shorter than one header")
    offset = 0
    pending = _Pending()
    while True:
        if deadline is not None and time.monotonic() > deadline:
            raise ArchiveTooLargeError(
                "", "scan-time", "reading the archive took longer than its time limit"
            )
        if offset + BLOCK > size:
            if pending:
                raise not_a_tar("it ends after an extended header, before its member")
            return  # the end of the file at a header's place: GNU tar reads such archives too
        raw.seek(offset)
        block = _read_exactly(raw, BLOCK)
        if block == ZERO_BLOCK:
            if pending:
                raise not_a_tar("an extended header is followed by the end of the archive")
            return  # what follows the end-of-archive block (more zeros, padding) is not read
        kind, info = _header(block)
        data_offset = offset + BLOCK
        offset = data_offset + _padded(info.size)
        if kind in (
            tarfile.XHDTYPE,
            tarfile.XGLTYPE,
            tarfile.GNUTYPE_LONGNAME,
            tarfile.GNUTYPE_LONGLINK,
        ):
            raw.seek(data_offset)
            pending.add(kind, _read_exactly(raw, info.size))  # capped by _header
            continue
        if kind == tarfile.GNUTYPE_SPARSE:
            raise UnsafeArchiveError(info.name, "sparse-file", "sparse files are not restored")
        pending.apply(info)
        info.offset = data_offset - BLOCK
        info.offset_data = data_offset
        yield info  # the caller checks its caps first: a huge size is refused as too large
        check_data_present(info, size)


def check_data_present(info: tarfile.TarInfo, size: int) -> None:
    """UnsafeArchiveError unless all of ``info``'s data lies within the archive's ``size``."""
    if info.offset_data + info.size > size:
        raise not_a_tar("it is truncated: a member's data runs past its end", info.name)


class _Pending:
    """The extended headers read since the last member: at most one of each kind."""

    def __init__(self) -> None:
        self.pax: dict[str, bytes] | None = None
        self.long_name: bytes | None = None
        self.long_link: bytes | None = None

    def __bool__(self) -> bool:
        return self.pax is not None or self.long_name is not None or self.long_link is not None

    def add(self, kind: bytes, data: bytes) -> None:
        if kind == tarfile.XGLTYPE:
            # A global header (git archive writes one, a comment) changes nothing read here;
            # its records are still parsed, so a malformed one is refused.
            pax_records(data)
            return
        if kind == tarfile.XHDTYPE:
            if self.pax is not None:
                raise not_a_tar("two pax headers for one member")
            self.pax = pax_records(data)
            return
        name = data.split(b"\x00", 1)[0]
        if kind == tarfile.GNUTYPE_LONGNAME:
            if self.long_name is not None:
                raise not_a_tar("two GNU long names for one member")
            self.long_name = name
        else:
            if self.long_link is not None:
                raise not_a_tar("two GNU long links for one member")
            self.long_link = name

    def apply(self, info: tarfile.TarInfo) -> None:
        """Give ``info`` the name, link, size and mtime the extended headers set; then forget
        them (they belong to this member only)."""
        pax = self.pax or {}
        if self.long_name is not None:
            if "path" in pax:
                raise not_a_tar("a member named both by a pax header and a GNU long name")
            info.name = _text(self.long_name)
        if self.long_link is not None:
            if "linkpath" in pax:
                raise not_a_tar("a link named both by a pax header and a GNU long link")
            info.linkname = _text(self.long_link)
        if any(key.startswith("GNU.sparse.") for key in pax):
            raise UnsafeArchiveError(info.name, "sparse-file", "sparse files are not restored")
        if "path" in pax:
            info.name = _text(pax["path"])
        if "linkpath" in pax:
            info.linkname = _text(pax["linkpath"])
        if "size" in pax:
            if not _DECIMAL.fullmatch(pax["size"]):
                raise not_a_tar("a pax size that is not a decimal number", info.name)
            info.size = int(pax["size"])
        if "mtime" in pax:
            mtime = _PAX_MTIME.fullmatch(pax["mtime"])
            if mtime is None:
                raise not_a_tar("a pax mtime that is not a number", info.name)
            info.mtime = int(mtime.group(1))
        if info.type == tarfile.AREGTYPE and info.name.endswith("/"):
            info.type = tarfile.DIRTYPE  # as tarfile and GNU tar read old archives
        if info.size and info.type not in _WITH_DATA:
            raise not_a_tar("a member that has no data declares some", info.name)
        self.pax = self.long_name = self.long_link = None


def pax_records(data: bytes) -> dict[str, bytes]:
    """The records of one pax header: ``"<length> <key>=<value>\\n"`` each, the length in
    ASCII decimal counting the whole record; each key once. One pass over ``data``."""
    records: dict[str, bytes] = {}
    position, end = 0, len(data)
    while position < end:
        if data[position] == 0:  # some writers pad the header's data with NULs
            if data.count(0, position) != end - position:
                raise not_a_tar("bytes after a NUL in a pax header")
            break
        space = data.find(b" ", position, position + MAX_PAX_LENGTH_DIGITS + 1)
        digits = data[position:space] if space > position else b""
        if not _DECIMAL.fullmatch(digits):
            raise not_a_tar("a pax record without a decimal length")
        length = int(digits)
        record_end = position + length
        if length <= len(digits) + 3 or record_end > end or data[record_end - 1] != 0x0A:
            raise not_a_tar("a pax record whose length does not match it")
        record = data[space + 1 : record_end - 1]
        equals = record.find(b"=")
        if equals <= 0:
            raise not_a_tar("a pax record without a key")
        try:
            key = record[:equals].decode("utf-8")
        except UnicodeDecodeError:
            raise not_a_tar("a pax key that is not UTF-8") from None
        if key in records:
            raise not_a_tar(f"the pax key {shown(key)!r} twice in one header")
        records[key] = record[equals + 1 :]
        position = record_end
    return records


def _header(block: bytes) -> tuple[bytes, tarfile.TarInfo]:
    """The type and the fields of one 512-byte header (checked; extended headers capped)."""
    checksum = _number(block[148:156], "checksum")
    unsigned = sum(block) - sum(block[148:156]) + 8 * 0x20
    if checksum not in (unsigned, sum(_SIGNED_HEADER.unpack(block)) + 8 * 0x20):
        raise not_a_tar("a header whose checksum does not match")
    magic = block[257:265]
    if magic not in (POSIX_MAGIC, GNU_MAGIC):
        raise not_a_tar("a header that is neither POSIX ustar nor GNU tar")
    kind = block[156:157]
    name = _field(block[0:100])
    if magic == POSIX_MAGIC and block[345] != 0:  # the prefix holds the name's start
        name = _field(block[345:500]) + b"/" + name
    info = tarfile.TarInfo(_text(name))
    info.type = kind
    info.mode = _number(block[100:108], "mode")
    info.size = _number(block[124:136], "size")
    info.mtime = _number(block[136:148], "mtime")
    info.linkname = _text(_field(block[157:257]))
    if info.size < 0:
        raise not_a_tar("a negative size", info.name)
    if kind in (tarfile.XHDTYPE, tarfile.XGLTYPE) and info.size > MAX_PAX_HEADER:
        raise UnsafeArchiveError(
            info.name,
            "header-too-large",
            f"a pax header of {info.size} bytes; at most {MAX_PAX_HEADER} are read",
        )
    if kind in (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK) and info.size > MAX_LONG_NAME:
        raise UnsafeArchiveError(
            "",
            "name-too-long",
            f"a GNU long name of {info.size} bytes; paths are at most {MAX_PATH} bytes",
        )
    if kind not in MEMBER_TYPES and kind not in (
        tarfile.XHDTYPE,
        tarfile.XGLTYPE,
        tarfile.GNUTYPE_LONGNAME,
        tarfile.GNUTYPE_LONGLINK,
        tarfile.GNUTYPE_SPARSE,
    ):
        raise UnsafeArchiveError(
            info.name,
            "unsupported-type",
            f"member type {shown(kind.decode('latin-1'))!r} is not restored",
        )
    return kind, info


def _number(field: bytes, what: str) -> int:
    """A numeric header field: ASCII octal digits (leading spaces, trailing NULs or spaces;
    empty is 0), or GNU's base-256 (first byte 0x80 positive, 0xff negative)."""
    if field[0] == 0x80:
        return int.from_bytes(field[1:], "big")
    if field[0] == 0xFF:
        return int.from_bytes(field, "big", signed=True)
    match = _OCTAL.fullmatch(field)
    if match is None:
        raise not_a_tar(f"a {what} field that is not ASCII octal digits")
    return int(match.group(1) or b"0", 8)


def _field(data: bytes) -> bytes:
    return data.split(b"\x00", 1)[0]


def _text(data: bytes) -> str:
    # As tarfile decodes: bytes that are not UTF-8 are kept (surrogates), so that the rules
    # refuse the name as 'name-not-utf8' rather than this reader as unreadable.
    return data.decode("utf-8", "surrogateescape")


def _padded(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


def _read_exactly(raw: IO[bytes], count: int) -> bytes:
    data = raw.read(count)
    if len(data) != count:
        raise not_a_tar("it ended while a header was read")
    return data
