"""The host's own tar of a directory (snapshots/nofollow_tar.py): what it records, what it never
follows, and its caps; read back with the host's archive scanner and with tarfile."""

from __future__ import annotations

import io
import os
import tarfile
import time
from pathlib import Path

import pytest

from jupyter_sandbox.protocol.snapshot_errors import (
    SnapshotFailedError,
    SnapshotTooLargeError,
    UnsafeArchiveError,
)
from jupyter_sandbox.sandbox.snapshots.archive_scan import ArchiveLimits, scan_archive
from jupyter_sandbox.sandbox.snapshots.nofollow_tar import (
    MAX_DEPTH,
    open_directory_beneath,
    write_tar,
)


def tar_of(root: Path, **caps: int | float) -> bytes:
    out = io.BytesIO()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        write_tar(
            fd,
            out.write,
            max_members=int(caps.get("max_members", 0)),
            max_bytes=int(caps.get("max_bytes", 0)),
            deadline=time.monotonic() + caps.get("seconds", 60),
            what="the test's directory",
        )
    finally:
        os.close(fd)
    return out.getvalue()


def members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        return {m.name: m for m in tar.getmembers()}


def test_files_links_and_modes_are_recorded_as_they_are(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "d" / "empty").mkdir(parents=True)
    (root / "d" / "a.txt").write_bytes(b"hello\n")
    (root / "d" / "a.txt").chmod(0o600)
    (root / "blob").write_bytes(os.urandom(70_000))
    (root / "link").symlink_to("d/a.txt")
    (root / "out").symlink_to("/etc")
    os.link(root / "blob", root / "hard")
    os.mkfifo(root / "pipe")
    (root / "é ü".encode().decode()).write_text("ünï")

    data = tar_of(root)
    found = members(data)
    assert sorted(found) == sorted(
        [".", "./blob", "./d", "./d/a.txt", "./d/empty", "./hard", "./link", "./out", "./é ü"]
    )  # the FIFO skipped
    assert found["./d/a.txt"].mode == 0o600
    assert found["./link"].issym()
    assert found["./link"].linkname == "d/a.txt"
    assert found["./out"].issym()
    assert found["./out"].linkname == "/etc"
    assert found["./hard"].islnk()
    assert found["./hard"].linkname == "./blob"
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        extracted = tar.extractfile("./blob")
        assert extracted is not None
        assert extracted.read() == (root / "blob").read_bytes()
    # The host's scanner reads it as any archive, and refuses the hard link as it does in the
    # archive GNU tar makes of the same directory.
    with pytest.raises(UnsafeArchiveError, match="hard links are not restored"):
        scan_archive(io.BytesIO(data), ArchiveLimits(allow_external_links=True))
    os.unlink(root / "hard")
    summary = scan_archive(io.BytesIO(tar_of(root)), ArchiveLimits(allow_external_links=True))
    assert summary.members == len(found) - 1


def test_a_link_at_any_component_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("host")
    root = tmp_path / "root"
    root.mkdir()
    (root / "workspace").symlink_to(outside)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError, match=r"Too many levels of symbolic links|Not a directory"):
            open_directory_beneath(fd, "/workspace")
        with pytest.raises(OSError, match=r"'\.\.' in"):
            open_directory_beneath(fd, "../root/workspace")
    finally:
        os.close(fd)


def test_caps_and_deadline_stop_the_walk(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    for i in range(20):
        (root / f"f{i}").write_bytes(b"x" * 2000)
    with pytest.raises(SnapshotTooLargeError, match="more than 5 entries"):
        tar_of(root, max_members=5)
    with pytest.raises(SnapshotTooLargeError, match="exceeds 10000 bytes"):
        tar_of(root, max_bytes=10_000)
    with pytest.raises(SnapshotFailedError, match="longer than its time limit"):
        tar_of(root, seconds=-1)


def test_a_tree_is_walked_to_its_depth_bound_and_refused_past_it(tmp_path: Path) -> None:
    """The walk holds a descriptor per level, in the server every owner shares: a chain of
    directories as deep as a path allows (1,200 levels, 2,400 bytes) is refused, saying why,
    rather than taking a thousand descriptors; one within MAX_DEPTH is archived whole."""
    for depth, refused in ((MAX_DEPTH - 1, False), (1200, True)):
        root = tmp_path / f"ws-{depth}"
        root.mkdir()
        fds = [os.open(root, os.O_RDONLY | os.O_DIRECTORY)]
        try:
            for _ in range(depth):  # relative: no path this long is ever named
                os.mkdir("d", dir_fd=fds[-1])
                fds.append(os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fds[-1]))
            if refused:
                with pytest.raises(SnapshotFailedError, match=f"deeper than {MAX_DEPTH} levels"):
                    tar_of(root)
            else:
                assert len(members(tar_of(root))) == depth + 1
        finally:
            # Removed bottom up here: shutil.rmtree (pytest's own clean-up) recurses per level.
            while fds:
                fd = fds.pop()
                os.close(fd)
                if fds:
                    os.rmdir("d", dir_fd=fds[-1])
