"""ProcessLock: one holder at a time, even after its file was removed under it; context lock
files removed once free."""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from pathlib import Path

import pytest

from jupyter_sandbox.sandbox.host import process_lock
from jupyter_sandbox.sandbox.host.process_lock import ProcessLock
from jupyter_sandbox.sandbox.lifecycle.contexts import (
    ContextLock,
    lock_path,
    remove_free_lock_files,
)


def test_one_holder_at_a_time(tmp_path: Path) -> None:
    first, second = ProcessLock(tmp_path / "x.lock"), ProcessLock(tmp_path / "x.lock")
    assert first.try_acquire(note="1")
    assert not second.try_acquire()  # flock: a second open file is refused, same process or not
    assert ProcessLock.is_held(tmp_path / "x.lock")
    assert second.note_of_holder() == "1"
    first.release()
    assert second.try_acquire()
    second.release()


def test_a_hold_on_a_removed_file_is_not_a_hold(tmp_path: Path) -> None:
    """The refiller asks again on every pass: once its lock file is gone (the state directory
    deleted under a running server), it must not go on believing it is the only refiller."""
    path = tmp_path / "pool" / "refill.lock"
    first, second = ProcessLock(path), ProcessLock(path)
    assert first.try_acquire()
    shutil.rmtree(tmp_path / "pool")
    assert second.try_acquire()  # a new file: nothing stops another process from taking it
    assert not first.try_acquire()  # the stale hold was dropped, and the new lock is taken
    assert not first.held
    second.release()
    assert first.try_acquire()  # and once free, taken anew
    first.release()


def test_release_can_remove_the_file(tmp_path: Path) -> None:
    path = tmp_path / "contexts" / "c1.lock"
    lock = ProcessLock(path)
    assert lock.try_acquire(note="1")
    lock.release(remove=True)
    assert not path.exists()
    assert lock.try_acquire()  # a new file, taken as usual
    lock.release()
    assert path.exists()  # without remove, the file stays


def test_a_lock_asked_not_to_make_its_directory_is_not_taken_without_it(tmp_path: Path) -> None:
    """A kernel's lifeline takes its context's lock to remove the sandbox: the state directory
    removed meanwhile (CI: a test's clean-up under way) must not be made again by it."""
    path = tmp_path / "state" / "locks" / "c1.lock"
    lock = ProcessLock(path)
    assert not lock.try_acquire(make_directory=False)
    assert not (tmp_path / "state").exists()
    path.parent.mkdir(parents=True)
    assert lock.try_acquire(make_directory=False)  # where the directory is, as usual
    lock.release(remove=True)


def test_a_file_removed_between_open_and_flock_is_not_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A holder that removes its file as it lets go may do so after another process opened
    that file and before it locks it: that process must take the file now at the path."""
    path = tmp_path / "c1.lock"
    holder, taker = ProcessLock(path), ProcessLock(path)
    assert holder.try_acquire()
    real_flock = fcntl.flock
    letting_go = False

    def flock_after_the_holder_let_go(fd: int, operation: int) -> None:
        nonlocal letting_go
        if holder.held and not letting_go:
            letting_go = True
            holder.release(remove=True)  # between the taker's open and its flock
        real_flock(fd, operation)

    monkeypatch.setattr(process_lock.fcntl, "flock", flock_after_the_holder_let_go)
    assert taker.try_acquire()
    monkeypatch.undo()
    assert ProcessLock.is_held(path)  # what a third process finds at the path is taken
    assert not ProcessLock(path).try_acquire()
    taker.release(remove=True)
    assert not path.exists()


def test_a_context_leaves_no_lock_file_once_released(tmp_path: Path) -> None:
    lock = ContextLock(tmp_path, "alice", "c1")
    lock.acquire()
    assert lock.path.exists()
    lock.release()
    assert not lock.path.exists()
    assert not ContextLock.is_held(lock.path)


def test_the_reaper_removes_only_free_old_lock_files(tmp_path: Path) -> None:
    held = ContextLock(tmp_path, "alice", "held")
    held.acquire()
    killed = lock_path(tmp_path, "alice", "killed")  # a kernel killed without letting go
    killed.write_text("4242")
    young = lock_path(tmp_path, "alice", "young")  # a kernel taking its context right now
    young.write_text("")
    old = time.time() - 3600
    for path in (held.path, killed):
        os.utime(path, (old, old))
    assert remove_free_lock_files(tmp_path, grace=60) == [killed.name]
    assert (held.path.exists(), young.exists(), killed.exists()) == (True, True, False)
    held.release()
