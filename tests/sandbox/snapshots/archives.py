"""Tar archives built in memory for the snapshot tests, member by member."""

from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass


@dataclass(frozen=True)
class Member:
    name: str
    kind: str = "file"  # file | dir | symlink | hardlink | fifo | chr | blk
    data: bytes = b""
    target: str = ""
    mode: int = 0o644
    size: int | None = None  # declared size, when it must differ from len(data)


TYPES = {
    "file": tarfile.REGTYPE,
    "dir": tarfile.DIRTYPE,
    "symlink": tarfile.SYMTYPE,
    "hardlink": tarfile.LNKTYPE,
    "fifo": tarfile.FIFOTYPE,
    "chr": tarfile.CHRTYPE,
    "blk": tarfile.BLKTYPE,
}


def tar_bytes(*members: Member, fmt: int = tarfile.PAX_FORMAT, compression: str = "") -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode=f"w:{compression}", format=fmt) as tar:
        for member in members:
            info = tarfile.TarInfo(member.name)
            info.type = TYPES[member.kind]
            info.mode = member.mode
            info.linkname = member.target
            if member.kind == "file":
                info.size = len(member.data) if member.size is None else member.size
                tar.addfile(info, io.BytesIO(member.data))
            else:
                tar.addfile(info)
    return out.getvalue()


def huge_declared_file(name: str, declared: int) -> bytes:
    """A tar whose one member declares ``declared`` bytes but holds none (a truncated bomb)."""
    info = tarfile.TarInfo(name)
    info.size = declared
    return info.tobuf(format=tarfile.GNU_FORMAT) + b"\0" * 1024
