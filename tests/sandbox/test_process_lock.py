"""ProcessLock: one holder at a time, even after its file was removed under it."""

from __future__ import annotations

import shutil
from pathlib import Path

from jupyter_sandbox.sandbox.process_lock import ProcessLock


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
