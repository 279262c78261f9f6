"""The host-dir transport never follows what the sandbox planted in its own directory."""

from __future__ import annotations

import hashlib
import io
import logging
import os
import tarfile
import threading
import time
from pathlib import Path

import pytest

from jupyter_sandbox.protocol.snapshot_errors import SnapshotFailedError, SnapshotTooLargeError
from jupyter_sandbox.sandbox.host.size_caps import can_cap
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.snapshots.host_dir_transport import HostDirInput, _copy_out
from tests.sandbox.snapshots.workspace_files import OWNER, manifest, sh


def test_reading_refuses_symlinks_and_fifos(tmp_path: Path) -> None:
    secret = tmp_path / "host-secret"
    secret.write_bytes(b"host only")
    (tmp_path / "link.tar").symlink_to(secret)
    os.mkfifo(tmp_path / "fifo.tar")  # opened without O_NONBLOCK this would hang
    for name in ("link.tar", "fifo.tar"):
        out = io.BytesIO()
        with pytest.raises(SnapshotFailedError):
            _copy_out(tmp_path / name, out, 1024, "0123456789ab")
        assert out.getvalue() == b""


def test_reading_is_capped(tmp_path: Path) -> None:
    (tmp_path / "big.tar").write_bytes(bytes(5000))
    with pytest.raises(SnapshotTooLargeError):
        _copy_out(tmp_path / "big.tar", io.BytesIO(), 4096, "0123456789ab")


def test_what_is_copied_no_longer_takes_space(tmp_path: Path) -> None:
    # On a capped io/ the archive's bytes count against the sandbox's memory until copied.
    data = os.urandom(5 * 2**20)
    (tmp_path / "done.tar").write_bytes(data)
    out = io.BytesIO()
    _copy_out(tmp_path / "done.tar", out, 0, "0123456789ab")
    assert out.getvalue() == data
    left = os.stat(tmp_path / "done.tar")
    assert left.st_size == len(data)
    assert left.st_blocks * 512 < 2**20


def test_reading_follows_the_file_while_tar_writes_it(tmp_path: Path) -> None:
    # The copy starts before the file exists and ends only once tar is done and all is read.
    path = tmp_path / "growing.tar"
    finished = threading.Event()
    pieces = [os.urandom(300_000) for _ in range(5)]

    def write_slowly() -> None:
        with open(path, "wb", buffering=0) as f:
            for piece in pieces:
                time.sleep(0.02)
                f.write(piece)
        finished.set()

    writer = threading.Thread(target=write_slowly)
    writer.start()
    out = io.BytesIO()
    _copy_out(path, out, 0, "0123456789ab", finished)
    writer.join()
    assert out.getvalue() == b"".join(pieces)


def test_reading_a_file_tar_never_made_fails(tmp_path: Path) -> None:
    finished = threading.Event()
    threading.Timer(0.05, finished.set).start()
    with pytest.raises(SnapshotFailedError, match="wrote no archive"):
        _copy_out(tmp_path / "missing.tar", io.BytesIO(), 0, "0123456789ab", finished)


def test_writing_never_opens_an_existing_name(tmp_path: Path) -> None:
    staged = HostDirInput(tmp_path)
    victim = tmp_path / "victim"
    victim.write_bytes(b"untouched")
    staged.path.symlink_to(victim)
    with pytest.raises(FileExistsError), staged:
        pass
    assert victim.read_bytes() == b"untouched"
    fresh = HostDirInput(tmp_path)
    with fresh as out:
        out.write(b"x")
        assert oct(fresh.path.stat().st_mode & 0o777) == "0o644"
    assert not fresh.path.exists()


@pytest.mark.integration
@pytest.mark.runc
async def test_the_cap_holds_inside_the_sandbox(
    manager: SandboxManager, purpose: str, tmp_path: Path
) -> None:
    snapshots = manager.snapshots
    snapshots.snapshot_dir = str(tmp_path)
    snapshots.transport = "host-dir"
    snapshots.max_archive_bytes = 1024**2
    sandbox = await manager.create(OWNER, runtime="runc", purpose=purpose)
    await sh(manager, sandbox.sandbox_id, "head -c 3M /dev/urandom > /workspace/f")
    with pytest.raises(SnapshotTooLargeError):
        await snapshots.persist(OWNER, sandbox.sandbox_id)
    io_dir = manager.settings.state_path / sandbox.sandbox_id / "io"
    assert [n for n in os.listdir(io_dir) if n.startswith(".snapshot")] == []
    assert snapshots.list_snapshots(OWNER) == []


@pytest.mark.integration
@pytest.mark.runc
@pytest.mark.skipif(not can_cap(), reason="capping the sandbox's io/ needs root")
async def test_an_archive_too_big_for_io_is_restored_over_exec(
    manager: SandboxManager, purpose: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Staged in a 16 MiB io/, a 24 MiB archive would fail with ENOSPC; it takes the exec
    # stream instead, and what the sandbox's kernel keeps in io/ is left alone.
    manager.snapshots.transport = "host-dir"
    manager.settings.io_size = "16m"
    sandbox = await manager.create(OWNER, runtime="runc", purpose=purpose)
    data = os.urandom(24 * 2**20)
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        member = tarfile.TarInfo("big.bin")
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data))
    with caplog.at_level(logging.INFO, logger="jupyter_sandbox.sandbox.snapshots.hydrate"):
        summary = await manager.snapshots.hydrate_bytes(
            OWNER, sandbox.sandbox_id, archive.getvalue()
        )
    assert summary.file_bytes == len(data)
    assert "over the exec stream" in caplog.text
    found = await manifest(manager, sandbox.sandbox_id)
    assert found["big.bin"][2:] == [len(data), hashlib.sha256(data).hexdigest()]
    io_dir = manager.settings.state_path / sandbox.sandbox_id / "io"
    assert [n for n in os.listdir(io_dir) if n.startswith(".snapshot")] == []
