"""JPY_PARENT_PID: believed only for an ancestor, watched through a pidfd (parent_watch.py)."""

from __future__ import annotations

import os
import select
import subprocess
import sys

import pytest

from jupyter_sandbox.kernel.parent_watch import is_ancestor, open_kernel_client, parent_pid_of

# A child that reports whether it watches its parent, then whether the watch fired once the
# parent (the intermediate shell) is gone.
CHILD = """
import os, select, sys
from jupyter_sandbox.kernel.parent_watch import open_kernel_client
fd = open_kernel_client()
print("watching" if fd is not None else "not watching", flush=True)
if fd is not None:
    ready, _, _ = select.select([fd], [], [], 20)
    print("parent gone" if ready else "still waiting", flush=True)
"""


def test_the_parent_chain_is_read_from_proc() -> None:
    assert parent_pid_of(os.getpid()) == os.getppid()
    assert is_ancestor(os.getppid(), os.getpid())
    assert not is_ancestor(os.getpid(), os.getpid())
    assert parent_pid_of(2**22 + 12345) is None  # beyond pid_max: no such process


# "\uff11\uff12": fullwidth digits, which int() reads but are no ASCII pid
@pytest.mark.parametrize("value", ["", "abc", "-1", "0", "\uff11\uff12", "12 ", "99999999999"])
def test_a_variable_that_is_no_ancestors_pid_is_ignored(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("JPY_PARENT_PID", value)
    assert open_kernel_client() is None


def test_a_live_process_that_is_not_an_ancestor_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    with subprocess.Popen(["sleep", "30"]) as unrelated:
        monkeypatch.setenv("JPY_PARENT_PID", str(unrelated.pid))
        try:
            assert open_kernel_client() is None
        finally:
            unrelated.kill()


def test_the_watch_fires_when_the_client_dies() -> None:
    # sh starts the child (sh is its JPY_PARENT_PID, as jupyter_client is a kernel's), then is
    # killed: the child's descriptor becomes readable.
    shell = subprocess.Popen(
        ["sh", "-c", f'export JPY_PARENT_PID=$$; "{sys.executable}" -c "$CHILD" & wait'],
        env={**os.environ, "CHILD": CHILD},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert shell.stdout is not None
    assert shell.stdout.readline() == "watching\n"
    shell.kill()
    shell.wait()
    ready, _, _ = select.select([shell.stdout], [], [], 30)
    assert ready
    assert shell.stdout.readline() == "parent gone\n"
    shell.stdout.close()


def test_a_forked_kernel_looks_from_its_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    # This process stands for the kernel's client, the child for its launcher: the client is
    # the launcher's parent, not an ancestor of the kernel (the zygote's child).
    with subprocess.Popen(["sleep", "30"]) as launcher:
        monkeypatch.setenv("JPY_PARENT_PID", str(os.getpid()))
        try:
            assert open_kernel_client() is None
            fd = open_kernel_client(stand_in=launcher.pid)
            assert fd is not None
            ready, _, _ = select.select([fd], [], [], 0)
            assert ready == []  # the client lives
            os.close(fd)
        finally:
            launcher.kill()
