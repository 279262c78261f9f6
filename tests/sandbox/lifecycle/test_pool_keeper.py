"""The headless pool keeper's zygote (pool_keeper.HeadlessZygote): one per state directory, and
none left once its keeper ends, however it ends. Real zygote processes, no engine."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from jupyter_sandbox.sandbox.host.zygote_process import headless_socket, start_zygote
from jupyter_sandbox.sandbox.lifecycle.pool_keeper import HeadlessZygote

LISTEN_SECONDS = 60.0  # the zygote imports the proxy kernel first: a second, more when loaded


def wait_listening(path: Path, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + LISTEN_SECONDS
    while not path.exists():
        assert process.poll() is None, f"the zygote exited with {process.returncode}"
        assert time.monotonic() < deadline, f"nothing listens at {path}"
        time.sleep(0.05)


def test_one_zygote_per_state_dir_and_a_keeper_takes_over_when_it_stops(
    state_dir: Path,
) -> None:
    first, second = HeadlessZygote(state_dir), HeadlessZygote(state_dir)
    try:
        first.keep()
        assert first.process is not None
        wait_listening(first.path, first.process)
        assert first.path == headless_socket(state_dir)
        assert first.path.stat().st_mode & 0o777 == 0o600
        assert first.path.parent.stat().st_mode & 0o777 == 0o700
        second.keep()
        assert second.process is None  # the first one's lock: one zygote per state directory

        process = first.process
        first.stop()
        assert process.poll() is not None
        assert not first.path.exists()
        assert not first.lock.path.exists()

        second.keep()  # the next check of another keeper starts its own
        assert second.process is not None
        wait_listening(second.path, second.process)
    finally:
        first.stop()
        second.stop()
    assert not second.path.exists()


def test_a_zygote_that_died_is_not_restarted_and_leaves_no_socket(state_dir: Path) -> None:
    zygote = HeadlessZygote(state_dir)
    try:
        zygote.keep()
        assert zygote.process is not None
        wait_listening(zygote.path, zygote.process)
        zygote.process.kill()  # leaves its socket behind: SIGKILL runs no cleanup
        zygote.process.wait()
        assert zygote.path.exists()
        zygote.keep()
        assert zygote.given_up
        assert zygote.process is None
        assert not zygote.path.exists()  # launchers start kernels the ordinary way
        assert not zygote.lock.path.exists()
        zygote.keep()
        assert zygote.process is None
    finally:
        zygote.stop()


def test_the_zygote_exits_when_its_keeper_is_killed(state_dir: Path) -> None:
    keeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    path = headless_socket(state_dir)
    zygote = start_zygote(path, keeper.pid)
    try:
        wait_listening(path, zygote)
        keeper.send_signal(signal.SIGKILL)
        keeper.wait()
        assert zygote.wait(timeout=10) == 0
        assert not path.exists()  # it removed its own socket
    finally:
        for process in (keeper, zygote):
            if process.poll() is None:
                process.kill()
                process.wait()
