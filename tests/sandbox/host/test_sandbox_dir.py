"""The sandbox's host directory: private, atomic, removable."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from jupyter_sandbox.protocol.errors import InvalidSettingError
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory, read_untrusted
from jupyter_sandbox.sandbox.programs.inside_listener import last_line


def test_tree_is_private_and_io_belongs_to_the_sandbox(state_dir: Path) -> None:
    directory = SandboxDirectory(state_dir / "state", "0123456789ab")
    directory.create(os.getuid())
    for path in (state_dir / "state", directory.root, directory.io):
        assert path.stat().st_mode & 0o777 == 0o700
    directory.write_connection_file({"key": "k"}, os.getuid())
    assert directory.connection_file.stat().st_mode & 0o777 == 0o600


@pytest.mark.skipif(os.geteuid() != 0, reason="handing files to another uid needs root")
def test_io_is_handed_to_the_sandbox_uid(state_dir: Path) -> None:
    directory = SandboxDirectory(state_dir, "0123456789ab")
    directory.create(10001)
    directory.write_connection_file({"key": "k"}, 10001)
    assert directory.io.stat().st_uid == 10001
    assert directory.connection_file.stat().st_uid == 10001
    assert directory.root.stat().st_uid == os.getuid()  # the state file stays out of reach


def test_state_is_written_atomically(state_dir: Path) -> None:
    directory = SandboxDirectory(state_dir, "0123456789ab")
    directory.create(os.getuid())
    directory.write_state({"context": "c1"})
    directory.write_state({"context": "c2"})
    assert directory.read_state() == {"context": "c2"}
    assert [p.name for p in directory.root.iterdir() if p.name.startswith(".")] == []


def test_unreadable_state_reads_as_empty(state_dir: Path) -> None:
    directory = SandboxDirectory(state_dir, "0123456789ab")
    directory.create(os.getuid())
    directory.state_file.write_text("{not json")
    assert directory.read_state() == {}


def test_too_long_a_state_dir_is_refused_before_creating(tmp_path: Path) -> None:
    deep = tmp_path / ("x" * 120)
    with pytest.raises(InvalidSettingError, match="too long for Unix socket"):
        SandboxDirectory(deep, "0123456789ab").create(os.getuid())
    assert not deep.exists()


def test_remove_is_idempotent(state_dir: Path) -> None:
    directory = SandboxDirectory(state_dir, "0123456789ab")
    directory.create(os.getuid())
    directory.remove()
    directory.remove()
    assert not directory.exists()


def test_a_restart_removes_the_sockets_of_kernels_before_the_current_one(state_dir: Path) -> None:
    directory = SandboxDirectory(state_dir, "0123456789ab")
    directory.create(os.getuid())
    kept = ["kernel.json", "kernel-exit.json", "restart-requested", "kernel-g7"]
    for name in [*kept, "kernel-5001", "kernel-g1-5001", "kernel-g2-5001", "kernel-g3-5001"]:
        (directory.io / name).touch()
    (directory.io / "kernel-g1-5002").symlink_to(directory.state_file)  # never followed
    directory.write_state({"generation": 3})
    assert directory.next_generation() == 4  # kernel 3 is still shutting down: it stays
    left = sorted(os.listdir(directory.io))
    assert left == sorted([*kept, "kernel-g3-5001"])
    assert directory.read_state()["generation"] == 4


def _write_many(state_dir: str, prefix: str) -> None:
    directory = SandboxDirectory(Path(state_dir), "0123456789ab")
    for i in range(100):
        directory.update_state(**{f"{prefix}{i}": i})


def test_concurrent_writers_lose_no_change(state_dir: Path) -> None:
    directory = SandboxDirectory(state_dir, "0123456789ab")
    directory.create(os.getuid())
    directory.write_state({})
    _two_writers(_write_many, state_dir)
    assert len(directory.read_state()) == 200


def _add_nested(state_dir: str, prefix: str) -> None:
    directory = SandboxDirectory(Path(state_dir), "0123456789ab")
    for i in range(100):
        # As memory snapshots keep their metadata: one key of the state holds a mapping.
        directory.modify_state(
            lambda state, i=i: {**state, "nested": {**state.get("nested", {}), f"{prefix}{i}": i}}
        )


def test_concurrent_changes_inside_one_key_lose_nothing(state_dir: Path) -> None:
    directory = SandboxDirectory(state_dir, "0123456789ab")
    directory.create(os.getuid())
    directory.write_state({"kept": True})
    _two_writers(_add_nested, state_dir)
    state = directory.read_state()
    assert state["kept"] is True
    assert len(state["nested"]) == 200


def _next_generations(state_dir: str, prefix: str) -> None:
    directory = SandboxDirectory(Path(state_dir), "0123456789ab")
    for _ in range(100):
        directory.next_generation()


def test_restarts_at_once_each_take_their_own_generation(state_dir: Path) -> None:
    directory = SandboxDirectory(state_dir, "0123456789ab")
    directory.create(os.getuid())
    directory.write_state({"generation": 0})
    _two_writers(_next_generations, state_dir)
    assert directory.read_state()["generation"] == 200


def _two_writers(target: Callable[[str, str], None], state_dir: Path) -> None:
    """Run ``target(state_dir, prefix)`` in two processes at once, prefixes "a" and "b"."""
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=target, args=(str(state_dir), p)) for p in ("a", "b")]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(60)


def test_a_file_the_sandbox_wrote_is_read_bounded_never_through_a_link_nor_a_fifo(
    tmp_path: Path,
) -> None:
    """What the host reads from io/ (read_untrusted): the sandbox may have put a link to a host
    file there, a FIFO that would block the read (and the server's loop) for good, or a file
    larger than anything the host wants to hold."""
    secret = tmp_path / "host-secret"
    secret.write_text("host-only marker\n")
    io = tmp_path / "io"
    io.mkdir()
    (io / "link.error").symlink_to(secret)
    os.mkfifo(io / "fifo.error")
    (io / "big.error").write_bytes(b"x" * 100_000 + b"\nthe last line\n")

    with pytest.raises(OSError, match="symbolic links"):  # ELOOP: O_NOFOLLOW
        read_untrusted(io / "link.error", 1024)
    with pytest.raises(OSError, match="not a regular file"):  # opened without waiting
        read_untrusted(io / "fifo.error", 1024)
    assert read_untrusted(io / "big.error", 1024) == b"x" * 1025  # one more: too large
    assert read_untrusted(io / "big.error", 20, tail=True) == b"xxxxx\nthe last line\n"
    # What a failed in-sandbox program's start reports (inside_listener.py).
    assert last_line(io / "link.error") == ""
    assert last_line(io / "fifo.error") == ""
    assert last_line(io / "big.error") == "the last line"
