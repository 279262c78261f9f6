"""The refresher of a copy-on-write /workspace, on a real overlayfs mounted on the host (what the
engine mounts for a sandbox), with a directory descriptor held open as gVisor's sentry holds
one. The sandboxes themselves are in test_workspace.py."""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from jupyter_sandbox.sandbox.host.size_caps import can_cap
from jupyter_sandbox.sandbox.workspace.refresh import (
    POKE_PREFIX,
    REFRESH_LOCK,
    Refresher,
    merged_mount,
    refresh_directory,
)

pytestmark = pytest.mark.skipif(not can_cap(), reason="mounting an overlay needs root")

MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass
class Overlay:
    lower: Path
    upper: Path
    merged: Path
    outside: Path  # a host directory beside the overlay, which nothing may write to


@pytest.fixture
def overlay() -> Iterator[Overlay]:
    base = Path(tempfile.mkdtemp(prefix="jsbx-ovl test ", dir="/tmp"))  # a space: escaped
    parts = Overlay(base / "lower", base / "upper", base / "merged", base / "outside")
    for path in (parts.lower / "sub", parts.upper, base / "work", parts.merged, parts.outside):
        path.mkdir(parents=True)
    (parts.lower / "old.csv").write_text("a\n")
    options = f"lowerdir={parts.lower},upperdir={parts.upper},workdir={base / 'work'}"
    if _libc.mount(b"overlay", bytes(parts.merged), b"overlay", 0, options.encode()) != 0:
        shutil.rmtree(base)
        pytest.fail(f"cannot mount an overlay: {os.strerror(ctypes.get_errno())}")
    try:
        yield parts
    finally:
        _libc.umount2(bytes(parts.merged), MNT_DETACH)
        shutil.rmtree(base)


def listing_through(fd: int) -> list[str]:
    """The merged directory's names read again through an open descriptor, as gVisor does."""
    os.lseek(fd, 0, os.SEEK_SET)
    return sorted(os.listdir(fd))


def test_the_merged_mount_is_found_by_its_upper_directory(overlay: Overlay) -> None:
    found = merged_mount(overlay.upper)
    assert found is not None
    assert found[0] == bytes(overlay.merged)
    assert found[1] == os.stat(overlay.merged).st_dev
    assert merged_mount(overlay.outside) is None


def test_a_refresh_drops_the_listing_an_open_descriptor_kept(overlay: Overlay) -> None:
    fd = os.open(overlay.merged, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert listing_through(fd) == ["old.csv", "sub"]
        (overlay.lower / "new.csv").write_text("b\n")
        assert listing_through(fd) == ["old.csv", "sub"]  # overlayfs's cache: the bug
        assert refresh_directory(overlay.upper, ())
        assert listing_through(fd) == ["new.csv", "old.csv", "sub"]
        (overlay.lower / "old.csv").unlink()
        (overlay.lower / "new.csv").rename(overlay.lower / "renamed.csv")
        assert refresh_directory(overlay.upper, ())
        assert listing_through(fd) == ["renamed.csv", "sub"]
        assert os.listdir(overlay.upper) == []  # the name made to refresh is gone again
    finally:
        os.close(fd)


def test_a_directory_only_in_the_lower_layer_is_left_alone(overlay: Overlay) -> None:
    # Read straight from the lower layer, it has no cache; touching it would copy it up.
    assert not refresh_directory(overlay.upper, (b"sub",))
    assert os.listdir(overlay.upper) == []
    (overlay.merged / "sub" / "made-inside.txt").write_text("x\n")  # now merged
    fd = os.open(overlay.merged / "sub", os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert listing_through(fd) == ["made-inside.txt"]
        (overlay.lower / "sub" / "downloaded.csv").write_text("c\n")
        assert refresh_directory(overlay.upper, (b"sub",))
        assert listing_through(fd) == ["downloaded.csv", "made-inside.txt"]
    finally:
        os.close(fd)


@pytest.mark.checklist(
    row=4,
    attack="the sandbox replaces a folder of a copy-on-write /workspace by a symbolic link to a "
    "host directory (and to its own upper layer's parent), then the host changes that folder, "
    "so that the host's refresher would create and remove a name through the link",
    expected="the refresher walks each name with O_NOFOLLOW and skips the folder: the host "
    "directory the link names is not written (its modification time stays), nothing is "
    "created beside the link",
)
def test_row4_a_folder_the_sandbox_replaced_by_a_link_is_never_followed(overlay: Overlay) -> None:
    # What the sandbox can do in its /workspace: remove the folder, put a link in its place.
    shutil.rmtree(overlay.merged / "sub")
    (overlay.merged / "sub").symlink_to(overlay.outside)
    (overlay.merged / "up").symlink_to(overlay.upper.parent)
    before = os.stat(overlay.outside).st_mtime_ns, os.stat(overlay.upper.parent).st_mtime_ns
    time.sleep(0.01)  # a write after this would move the modification times on
    (overlay.lower / "sub" / "downloaded.csv").write_text("c\n")
    (overlay.lower / "up").mkdir()
    assert not refresh_directory(overlay.upper, (b"sub",))
    assert not refresh_directory(overlay.upper, (b"up",))
    after = os.stat(overlay.outside).st_mtime_ns, os.stat(overlay.upper.parent).st_mtime_ns
    assert after == before
    assert os.listdir(overlay.outside) == []


def test_no_overlay_mounted_is_nothing_to_refresh(tmp_path: Path) -> None:
    (tmp_path / "upper").mkdir()
    assert not refresh_directory(tmp_path / "upper", ())
    assert os.listdir(tmp_path / "upper") == []


def test_the_refresher_follows_new_moved_and_removed_folders(overlay: Overlay) -> None:
    refresher = Refresher(overlay.lower, overlay.upper)
    try:
        refresher.watch_tree(())
        assert sorted(refresher.watches.values()) == [(), (b"sub",)]
        (overlay.lower / "new").mkdir()
        (overlay.lower / "new" / "f.csv").write_text("x\n")
        changed = refresher.changed_directories(refresher.inotify.read())
        assert changed == {(), (b"new",)}
        (overlay.lower / "new").rename(overlay.lower / "sub" / "moved")
        changed = refresher.changed_directories(refresher.inotify.read())
        assert changed == {(), (b"sub",), (b"sub", b"moved")}
        assert sorted(refresher.watches.values()) == [(), (b"sub",), (b"sub", b"moved")]
        shutil.rmtree(overlay.lower / "sub")
        changed = refresher.changed_directories(refresher.inotify.read())
        assert (b"sub",) in changed
        assert sorted(refresher.watches.values()) == [()]
    finally:
        refresher.inotify.close()


def test_the_refresher_watches_no_more_folders_than_its_bound(overlay: Overlay) -> None:
    for number in range(5):
        (overlay.lower / f"d{number}").mkdir()
    refresher = Refresher(overlay.lower, overlay.upper, max_watches=3)
    try:
        refresher.watch_tree(())
        assert len(refresher.watches) == 3
        assert refresher.full
    finally:
        refresher.inotify.close()


def test_the_process_refreshes_and_ends_once_its_sandbox_directory_is_gone(
    overlay: Overlay, tmp_path: Path
) -> None:
    root = tmp_path / "sandbox"
    root.mkdir()
    # Listed (so cached) by the sandbox before the refresher watches, then changed by the host.
    fd = os.open(overlay.merged, os.O_RDONLY | os.O_DIRECTORY)
    assert listing_through(fd) == ["old.csv", "sub"]
    (overlay.lower / "early.csv").write_text("a\n")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter_sandbox.sandbox.workspace.refresh",
            str(root),
            str(overlay.lower),
            str(overlay.upper),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == b"ready\n"
        assert (root / REFRESH_LOCK).read_text() == str(process.pid)
        assert listing_through(fd) == ["early.csv", "old.csv", "sub"]  # refreshed at its start
        (overlay.lower / "uploaded.csv").write_text("b\n")
        deadline = time.monotonic() + 20  # a bound for a loaded machine, not a timing check
        while "uploaded.csv" not in listing_through(fd):
            assert time.monotonic() < deadline, listing_through(fd)
            time.sleep(0.05)
        shutil.rmtree(root)
        assert process.wait(timeout=20) == 0
        # Made and removed again (a listing may see it between the two).
        assert not [n for n in os.listdir(overlay.upper) if n.startswith(POKE_PREFIX)]
    finally:
        os.close(fd)
        process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


def fill(folder: Path) -> int | None:
    """What the sandbox may do: make files until its upper layer is full; the error then."""
    for number in range(1000):
        try:
            (folder / f"filler-{number}").touch()
        except OSError as exc:
            return exc.errno
    return None


@pytest.fixture
def full_overlay(tmp_path: Path) -> Iterator[Overlay]:
    """An overlay whose upper layer is a tmpfs of 16 files (a size cap), filled by the sandbox."""
    cap = tmp_path / "cap"
    cap.mkdir()
    if _libc.mount(b"tmpfs", bytes(cap), b"tmpfs", 0, b"nr_inodes=16") != 0:
        pytest.fail(f"cannot mount a tmpfs: {os.strerror(ctypes.get_errno())}")
    parts = Overlay(tmp_path / "lower", cap / "upper", tmp_path / "merged", tmp_path / "outside")
    for path in (parts.lower, parts.upper, cap / "work", parts.merged, parts.outside):
        path.mkdir()
    options = f"lowerdir={parts.lower},upperdir={parts.upper},workdir={cap / 'work'}"
    try:
        if _libc.mount(b"overlay", bytes(parts.merged), b"overlay", 0, options.encode()) != 0:
            pytest.fail(f"cannot mount an overlay: {os.strerror(ctypes.get_errno())}")
        assert fill(parts.merged) == errno.ENOSPC
        yield parts
    finally:
        _libc.umount2(bytes(parts.merged), MNT_DETACH)
        _libc.umount2(bytes(cap), MNT_DETACH)


def test_a_full_upper_layer_is_said_once_and_the_refresher_goes_on(
    full_overlay: Overlay, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(OSError, match="No space"):
        refresh_directory(full_overlay.upper, ())
    root = tmp_path / "sandbox"
    root.mkdir()
    refresher = Refresher(full_overlay.lower, full_overlay.upper)
    refresher.watch_tree(())
    thread = threading.Thread(target=refresher.run, args=(root,))
    thread.start()
    try:
        for number in range(3):
            (full_overlay.lower / f"uploaded-{number}.csv").write_text("b\n")
            time.sleep(0.4)  # each its own refresh (past the settling time), not a timing check
    finally:
        root.rmdir()
        thread.join(timeout=20)
        refresher.inotify.close()
    assert not thread.is_alive()
    warnings = [r for r in caplog.records if "cannot refresh /workspace/" in r.getMessage()]
    assert len(warnings) == 1, warnings
