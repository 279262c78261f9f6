"""The tmpfs caps on a sandbox's host directories: mounted, full at their size, removed."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_sandbox.protocol.errors import HostCapError
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.host.size_caps import (
    can_cap,
    mount_capped,
    release_bytes,
    unmount_caps,
)
from jupyter_sandbox.sandbox.settings import SandboxSettings

needs_root = pytest.mark.skipif(not can_cap(), reason="mounting a cap needs root")


def fill(path: Path, limit: int) -> tuple[int, int]:
    """Write zeros to ``path`` until an error or ``limit`` bytes: (errno or 0, bytes written)."""
    written = 0
    with open(path, "wb") as f:
        try:
            while written < limit:
                f.write(b"\0" * 2**20)
                f.flush()
                written += 2**20
        except OSError as exc:
            return exc.errno or 0, written
    return 0, written


@needs_root
def test_a_capped_directory_is_full_at_its_size_and_removed_on_unmount(state_dir: Path) -> None:
    target = state_dir / "io"
    target.mkdir()
    mount_capped(target, 8 * 2**20, uid=4321, max_files=16, executable=False)
    try:
        assert os.path.ismount(target)
        assert (target.stat().st_uid, target.stat().st_mode & 0o777) == (4321, 0o700)
        code, written = fill(target / "fill", 64 * 2**20)
        assert (code, written) == (errno.ENOSPC, 8 * 2**20)
        (target / "fill").unlink()
        for n in range(15):  # the root directory is the 16th inode
            (target / f"f{n}").touch()
        with pytest.raises(OSError, match="No space left") as made:  # the inode cap
            (target / "one-too-many").touch()
        assert made.value.errno == errno.ENOSPC
    finally:
        unmount_caps(target)
    assert not os.path.ismount(target)
    assert list(target.iterdir()) == []  # what was written went with the mount


@needs_root
def test_unmounting_leaves_plain_and_missing_directories_alone(state_dir: Path) -> None:
    plain = state_dir / "plain"
    plain.mkdir()
    (plain / "kept").write_text("x")
    unmount_caps(plain, state_dir / "missing")
    assert (plain / "kept").read_text() == "x"


@needs_root
def test_a_cap_that_cannot_be_mounted_says_what_to_do(state_dir: Path) -> None:
    with pytest.raises(HostCapError, match="cap_host_writes = False"):
        mount_capped(state_dir / "missing", 2**20, uid=os.getuid())


@needs_root
def test_removing_a_sandbox_directory_unmounts_its_caps(state_dir: Path) -> None:
    directory = SandboxDirectory(state_dir, "0123456789ab")
    directory.create(4321, io_cap=2**20)
    directory.create_overlay(4321, cap=2**20)
    assert os.path.ismount(directory.io)
    assert os.path.ismount(directory.overlay)
    assert directory.overlay_upper.stat().st_uid == 4321
    directory.remove()
    directory.remove()  # again: nothing left to do
    assert not directory.root.exists()
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(directory.root) not in mounts


@needs_root
def test_a_server_in_a_mount_namespace_of_its_own_does_not_cap() -> None:
    # Its mounts would be invisible to the engine (systemd's PrivateTmp makes such a server).
    ask = "from jupyter_sandbox.sandbox.host.size_caps import why_no_caps; print(why_no_caps())"
    seen = subprocess.run(
        ["unshare", "--mount", sys.executable, "-c", ask],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "mount namespace of its own" in seen.stdout


def test_released_bytes_no_longer_take_space(tmp_path: Path) -> None:
    path = tmp_path / "archive"
    path.write_bytes(os.urandom(4 * 2**20))
    fd = os.open(path, os.O_RDWR)
    try:
        before = os.fstat(fd).st_blocks
        release_bytes(fd, 0, 3 * 2**20)
        after = os.fstat(fd)
    finally:
        os.close(fd)
    assert after.st_size == 4 * 2**20  # the file keeps its size: a writer appends after it
    assert after.st_blocks <= before // 4 + 8
    assert path.read_bytes()[: 3 * 2**20] == bytes(3 * 2**20)


def test_an_io_size_of_nothing_is_refused() -> None:
    settings = SandboxSettings(io_size="0")
    with pytest.raises(ValueError, match="io_size must be at least 1m"):
        settings.io_bytes  # noqa: B018


def test_caps_are_off_when_turned_off() -> None:
    assert not SandboxSettings(cap_host_writes=False).capping_host_writes
    assert SandboxSettings().capping_host_writes == can_cap()
