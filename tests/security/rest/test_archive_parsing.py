"""Rows 40-42 and 44: hostile archives posted to ``POST /api/snapshots`` of a real server.

Issue 31 found the host's tar parsing (the standard library's ``tarfile``) could freeze every
user's requests (a pax header of digits: quadratic, CVE-2024-6232) and balloon the server (a
gzip of a 400 MB GNU long name: 93 MB to 3.2 GB), and that the 400 answer echoed the whole
name. The server here runs in the test's own process and event loop, so a scan that holds the
interpreter stalls the test's other requests too, and the process's peak RSS is the server's.
"""

from __future__ import annotations

import asyncio
import tarfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.sandbox.snapshots.archives import Member, tar_bytes
from tests.server_extension.conftest import Fetch, api
from tests.server_extension.test_auth_and_spec import with_named_users

pytestmark = pytest.mark.integration

ALICE = {"headers": {"Authorization": "token alice"}}
BOB = {"headers": {"Authorization": "token bob"}}
# Seconds within which bob's list and alice's refusals are answered while alice's hostile
# archives are read. Measured: under 0.1 s after the fix; before it, the pax header of 60,000
# digits alone held the server about 17 s on the 2-core CI machine (150,000: 104 s).
BOUND = 5.0
# How much the server's peak RSS may grow while it refuses the long-name bomb: the request
# body (~0.4 MB) and a few MiB of decompression are expected; before the fix, 3.1 GB.
RSS_GROWTH_BOUND = 150 * 1024**2
LONG_NAME_BYTES = 400 * 1024**2


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    config = with_named_users(jp_server_config)
    return {**config, "Snapshots": {"snapshot_dir": str(tmp_path / "snapshots")}}


def pax_header_archive(records: bytes) -> bytes:
    """A pax header holding ``records`` as they are, then an empty file 'f'."""
    header = tarfile.TarInfo("PaxHeader")
    header.type = tarfile.XHDTYPE
    header.size = len(records)
    padding = bytes(-len(records) % 512)
    member = tarfile.TarInfo("f").tobuf(tarfile.USTAR_FORMAT)
    return header.tobuf(tarfile.USTAR_FORMAT) + records + padding + member + bytes(1024)


def long_name_bomb(name_bytes: int) -> bytes:
    """A gzip of one GNU long-name header declaring ``name_bytes`` of name, and the name."""
    header = tarfile.TarInfo("././@LongLink")
    header.type = tarfile.GNUTYPE_LONGNAME
    header.size = name_bytes
    deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    out = [deflate.compress(header.tobuf(tarfile.GNU_FORMAT))]
    piece = b"a" * 1024**2
    for _ in range(name_bytes // len(piece)):
        out.append(deflate.compress(piece))
    out.append(deflate.compress(bytes(512) * 3))
    out.append(deflate.flush())
    return b"".join(out)


def peak_rss() -> int:
    """This process's peak resident set since the last reset_peak_rss (bytes)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/self/status")


def reset_peak_rss() -> None:
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # resets VmHWM to the current RSS (proc(5))


async def timed(request: Any) -> tuple[float, Any]:
    started = time.monotonic()
    answer = await request
    return time.monotonic() - started, answer


async def assert_nothing_stored(fetch: Fetch, tmp_path: Path) -> None:
    """alice has no snapshot, and no file (a partial archive) is left in the store."""
    assert await api(fetch, "GET", root="snapshots", **ALICE) == (200, [])
    assert [p.name for p in (tmp_path / "snapshots").rglob("*") if p.is_file()] == []


async def post(fetch: Fetch, data: bytes, **params: str) -> tuple[int, Any]:
    return await api(fetch, "POST", body=data, root="snapshots", params=params, **ALICE)


@pytest.mark.checklist(
    row=40,
    attack="pax headers of digits (tarfile's quadratic case, CVE-2024-6232) posted to "
    "/api/snapshots, one within the header cap and one over it, while another user lists",
    expected="both refused from their headers at once; the other user's list is answered "
    "within the bound throughout",
)
async def test_a_hostile_pax_header_does_not_freeze_other_users(
    jp_fetch: Fetch, observe: Callable[..., None]
) -> None:
    within_cap = pax_header_archive(b"1" * 60_000)  # ~17 s in tarfile on this Python
    over_cap = pax_header_archive(b"1" * 150_000)  # 104 s
    assert await api(jp_fetch, "GET", root="snapshots", **BOB) == (200, [])
    hostile = [
        asyncio.ensure_future(timed(post(jp_fetch, data))) for data in (within_cap, over_cap)
    ]
    await asyncio.sleep(0)  # alice's requests are in the server before bob asks
    list_seconds, (status, listed) = await timed(api(jp_fetch, "GET", root="snapshots", **BOB))
    (within_seconds, within), (over_seconds, over) = await asyncio.gather(*hostile)
    assert (status, listed) == (200, [])
    assert (within[0], within[1]["code"], within[1]["rule"]) == (400, "unsafe_archive", "not-a-tar")
    assert (over[0], over[1]["rule"]) == (400, "header-too-large")
    assert max(list_seconds, within_seconds, over_seconds) < BOUND
    assert await api(jp_fetch, "GET", root="snapshots", **ALICE) == (200, [])
    observe(
        f"refused as {within[1]['rule']} in {within_seconds:.3f} s and {over[1]['rule']} in "
        f"{over_seconds:.3f} s; bob's list answered in {list_seconds:.3f} s",
        cases=2,
    )


@pytest.mark.checklist(
    row=41,
    attack="a 0.4 MB gzip of a tar whose GNU long name declares and holds 400 MB, posted "
    "plain and with compression=gzip",
    expected="refused unread as compressed, then decompressed in pieces and refused at the "
    "ratio cap; the server's peak RSS grows by a few MiB, nothing is stored",
)
async def test_a_long_name_bomb_does_not_balloon_the_server(
    jp_fetch: Fetch, tmp_path: Path, observe: Callable[..., None]
) -> None:
    bomb = long_name_bomb(LONG_NAME_BYTES)
    assert len(bomb) < 1024**2
    reset_peak_rss()
    before = peak_rss()
    status, plain = await post(jp_fetch, bomb)
    assert (status, plain["rule"]) == (400, "compressed"), plain
    status, inflated = await post(jp_fetch, bomb, compression="gzip")
    growth = peak_rss() - before
    assert (status, inflated["rule"]) == (413, "compression-ratio"), inflated
    assert growth < RSS_GROWTH_BOUND
    assert len(inflated["message"]) < 500
    await assert_nothing_stored(jp_fetch, tmp_path)
    observe(
        f"{len(bomb)} bytes refused as {plain['rule']} unread, and as {inflated['rule']} "
        f"when decompressed; peak RSS grew {growth / 1024**2:.1f} MiB",
        cases=2,
    )


@pytest.mark.checklist(
    row=42,
    attack="names of 3,000 characters with terminal escapes, and a GNU long name declaring "
    "400 MB, in archives posted to /api/snapshots",
    expected="each refused with a message and member of at most ~100 characters of the name, "
    "escaped; no control character reaches the answer",
)
async def test_refusals_do_not_echo_the_attackers_bytes(
    jp_fetch: Fetch, observe: Callable[..., None]
) -> None:
    name = "\x1b]0;owned\x07\x1b[2J" + "n" * 3000 + "/../escape"
    traversal = tar_bytes(Member(name, data=b"x"))
    header = tarfile.TarInfo("././@LongLink")
    header.type = tarfile.GNUTYPE_LONGNAME
    header.size = LONG_NAME_BYTES  # declared; the 4 KiB after it are all the name there is
    long_name = header.tobuf(tarfile.GNU_FORMAT) + b"a" * 4096
    answers = [await post(jp_fetch, traversal), await post(jp_fetch, long_name)]
    assert [(status, error["rule"]) for status, error in answers] == [
        (400, "parent-traversal"),
        (400, "name-too-long"),
    ]
    for _, error in answers:
        for text in (error["message"], error["member"]):
            assert len(text) < 300, text
            assert text.isprintable(), text
    observe(
        "answers of "
        + " and ".join(f"{len(error['message'])} characters" for _, error in answers)
        + ", printable",
        cases=2,
    )


@pytest.mark.checklist(
    row=44,
    attack="a gzip bomb (64 MiB of zeros per 64 KiB) posted as an archive, without and with "
    "compression=gzip; a bzip2 archive",
    expected="without: refused as compressed, nothing decompressed; with: decompressed in "
    "pieces and refused at the ratio cap; bzip2 refused as compressed; nothing stored",
)
async def test_compressed_archives_are_decompressed_only_when_asked(
    jp_fetch: Fetch, tmp_path: Path, observe: Callable[..., None]
) -> None:
    zeros = tar_bytes(*(Member(f"z{i}", data=bytes(16 * 1024**2)) for i in range(5)))
    bomb = zlib.compress(zeros, 9, wbits=16 + zlib.MAX_WBITS)
    bzip2 = tar_bytes(Member("b", data=b"b" * 1000), compression="bz2")
    answers = [
        await post(jp_fetch, bomb),
        await post(jp_fetch, bomb, compression="gzip"),
        await post(jp_fetch, bzip2),
        await post(jp_fetch, bzip2, compression="gzip"),
    ]
    assert [(status, error.get("rule")) for status, error in answers] == [
        (400, "compressed"),
        (413, "compression-ratio"),
        (400, "compressed"),
        (400, "not-gzip"),
    ]
    await assert_nothing_stored(jp_fetch, tmp_path)
    observe(f"a {len(bomb)}-byte gzip of {len(zeros)} bytes and a bzip2 refused", cases=4)
