"""Directories the server makes for itself are private at every level it makes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from jupyter_sandbox.sandbox.host.private_paths import make_private_dir
from jupyter_sandbox.sandbox.host.process_lock import ProcessLock


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_every_missing_level_is_made_0700_and_existing_ones_are_left(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        (tmp_path / "shared").mkdir(mode=0o755)
        make_private_dir(tmp_path / "shared" / "state" / "contexts" / "alice")
        make_private_dir(tmp_path / "shared" / "state")  # exists: nothing to do
    finally:
        os.umask(old)
    assert mode(tmp_path / "shared") == 0o755
    for level in ("state", "state/contexts", "state/contexts/alice"):
        assert mode(tmp_path / "shared" / level) == 0o700, level


def test_a_lock_made_first_leaves_a_private_state_directory(tmp_path: Path) -> None:
    # The first thing a kernel makes in a new state directory is its context's lock.
    state = tmp_path / "sandboxes"
    lock = ProcessLock(state / "contexts" / "alice" / "c1.lock")
    assert lock.try_acquire()
    lock.release()
    assert (mode(state), mode(state / "contexts")) == (0o700, 0o700)
