"""What a gateway client may choose for its kernel (jupyter_sandbox/gateway/kernel_env.py): the
KERNEL_SANDBOX_* choices, the owner (never the client's), and the working directory inside the
owner's root, symbolic links followed. Real directories under a temporary root; no engine."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import Any

import pytest

from jupyter_sandbox.gateway import kernel_env
from jupyter_sandbox.gateway.kernel_env import (
    MAX_VALUE_LENGTH,
    check_choices,
    checked_launch,
    kernel_launch,
    user_root_of,
    working_directory,
)
from jupyter_sandbox.protocol.errors import HostFilesTimeoutError, InvalidSettingError
from jupyter_sandbox.sandbox.settings import SandboxSettings


@pytest.fixture
def homes(tmp_path: Path) -> Path:
    (tmp_path / "alice" / "notes").mkdir(parents=True)
    (tmp_path / "bob").mkdir()
    return tmp_path


def test_the_choices_become_the_kernels_variables(homes: Path) -> None:
    sent = {
        "KERNEL_SANDBOX_CONTEXT": "analysis",
        "KERNEL_SANDBOX_RUNTIME": "runc",
        "KERNEL_SANDBOX_LIMITS": "memory=1g",
        "KERNEL_SANDBOX_NETWORK": "none",
        "KERNEL_SANDBOX_IMAGE": "jupyter-sandbox/python:0.1.0",
        "KERNEL_WORKING_DIR": str(homes / "alice" / "notes"),
        "KERNEL_LAUNCH_TIMEOUT": "40",
    }
    launch = kernel_launch(sent, "alice", homes / "alice", base_env={"PATH": "/usr/bin"})
    assert launch.env == {
        "PATH": "/usr/bin",
        "JUPYTER_SANDBOX_CONTEXT": "analysis",
        "JUPYTER_SANDBOX_RUNTIME": "runc",
        "JUPYTER_SANDBOX_LIMITS": "memory=1g",
        "JUPYTER_SANDBOX_NETWORK": "none",
        "JUPYTER_SANDBOX_IMAGE": "jupyter-sandbox/python:0.1.0",
        "JUPYTER_SANDBOX_OWNER": "alice",
        "JUPYTER_SANDBOX_WORKSPACE_ROOT": str(homes / "alice"),  # walked from, without links
    }
    assert launch.cwd == str(homes / "alice" / "notes")


def test_the_owner_is_never_the_clients(homes: Path) -> None:
    sent = {
        "KERNEL_USERNAME": "bob",
        "JUPYTER_SANDBOX_OWNER": "bob",
        "JUPYTERHUB_USER": "bob",
        "KERNEL_SANDBOX_OWNER": "bob",
    }
    base = {
        "JUPYTERHUB_API_TOKEN": "the service's",
        "JUPYTER_SANDBOX_CONTEXT": "gateway's",
        "JUPYTER_SANDBOX_WORKSPACE_ROOT": "/",
    }
    launch = kernel_launch(sent, "alice", homes / "alice", base_env=base)
    assert launch.env == {  # nor the gateway's secrets, nor a root of its own
        "JUPYTER_SANDBOX_OWNER": "alice",
        "JUPYTER_SANDBOX_WORKSPACE_ROOT": str(homes / "alice"),
    }
    assert launch.cwd == str(homes / "alice")


@pytest.mark.parametrize(
    ("sent", "said"),
    [
        ([], "an object of strings"),
        ({"KERNEL_SANDBOX_RUNTIME": 1}, "must be a string"),
        ({"KERNEL_SANDBOX_NETWORK": "a\nb"}, "printable"),
        ({"KERNEL_SANDBOX_NETWORK": "x" * (MAX_VALUE_LENGTH + 1)}, "at most"),
        ({f"KERNEL_{n}": "" for n in range(300)}, "more than"),
        ({"KERNEL_WORKING_DIR": "notes"}, "absolute path"),
        ({"KERNEL_WORKING_DIR": "/nowhere/at/all"}, "is not a directory within your files"),
    ],
)
def test_bad_input_is_refused_with_what_to_send(homes: Path, sent: object, said: str) -> None:
    with pytest.raises(InvalidSettingError, match=said):
        kernel_launch(sent, "alice", homes / "alice", base_env={})


def test_a_directory_outside_the_root_is_refused(homes: Path) -> None:
    root = homes / "alice"
    for outside in [homes / "bob", root / ".." / "bob", Path("/")]:
        with pytest.raises(InvalidSettingError, match="is not a directory within your files"):
            working_directory(str(outside), root)


def test_a_symbolic_link_out_of_the_root_is_refused(homes: Path) -> None:
    root = homes / "alice"
    (root / "escape").symlink_to(homes / "bob")
    with pytest.raises(InvalidSettingError, match="is not a directory within your files"):
        working_directory(str(root / "escape"), root)
    (root / "inside").symlink_to(root / "notes")  # a link that stays inside is followed
    assert working_directory(str(root / "inside"), root) == root / "notes"


def refusal(asked: Path, root: Path) -> str:
    """What the gateway answers to a working directory ``asked`` of ``root``'s user, with the
    path asked for taken out (the user wrote it, so it tells them nothing)."""
    with pytest.raises(InvalidSettingError) as refused:
        working_directory(str(asked), root)
    return refused.value.message.replace(repr(str(asked)), "<asked>")


@pytest.mark.checklist(
    row=144,
    attack="a hub user names working directories in another user's home (a directory, a "
    "file, a missing path, a symbolic link of theirs pointing there) to learn what exists",
    expected="one and the same refusal for each, existing or not: nothing about other "
    "users' files is told",
)
def test_paths_outside_the_root_all_get_the_same_answer(homes: Path, observe: Any) -> None:
    root = homes / "alice"
    (homes / "bob" / "secret.txt").write_text("his\n")
    (root / "to-bob").symlink_to(homes / "bob")
    (root / "to-nowhere").symlink_to(homes / "bob" / "missing")
    tried = [
        homes / "bob",  # a directory
        homes / "bob" / "secret.txt",  # a file
        homes / "bob" / "missing",  # nothing
        root / ".." / "bob" / "missing",  # nothing, through '..'
        root / "to-bob",  # inside, leaving through a link to a directory
        root / "to-bob" / "secret.txt",  # … to a file
        root / "to-nowhere",  # … to nothing
    ]
    answers = {refusal(asked, root) for asked in tried}
    assert len(answers) == 1, answers
    assert "KERNEL_WORKING_DIR <asked> is not a directory within your files" in answers.pop()
    observe(f"{len(tried)} paths outside the root, existing or not: one answer", cases=len(tried))


def test_a_missing_directory_inside_the_root_is_refused(homes: Path) -> None:
    root = homes / "alice"
    (root / "notes" / "a.txt").write_text("")
    for asked in [root / "gone", root / "notes" / "a.txt"]:
        with pytest.raises(InvalidSettingError, match="is not a directory within your files"):
            working_directory(str(asked), root)


async def test_the_launch_is_checked_off_the_event_loop(homes: Path) -> None:
    sent = {"KERNEL_WORKING_DIR": str(homes / "alice" / "notes")}
    launch = await checked_launch(sent, "alice", homes / "alice", base_env={})
    assert launch.cwd == str(homes / "alice" / "notes")
    with pytest.raises(InvalidSettingError, match="is not a directory within your files"):
        await checked_launch({"KERNEL_WORKING_DIR": "/"}, "alice", homes / "alice", base_env={})


async def test_a_host_that_does_not_answer_stalls_no_one(
    homes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A look at a user's files that hangs (a dead NFS mount: here a FIFO, whose open waits
    for a writer) is given up on in time, and the event loop serves meanwhile."""
    fifo = homes / "alice" / "hung"
    os.mkfifo(fifo)
    monkeypatch.setattr(kernel_env, "LOOK_SECONDS", 0.5)
    monkeypatch.setattr(kernel_env, "kernel_launch", _reading(fifo))
    ticks = 0

    async def ticking() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticker = asyncio.ensure_future(ticking())
    try:
        with pytest.raises(HostFilesTimeoutError, match="did not show"):
            await checked_launch(None, "alice", homes / "alice", base_env={})
        assert ticks > 0  # the loop ran while the look hung
        with pytest.raises(HostFilesTimeoutError, match="did not show"):
            await checked_launch(None, "alice", homes / "alice", base_env={})
        # Two looks of hers hang: a third is refused at once, without a thread; bob's goes on.
        with pytest.raises(HostFilesTimeoutError, match="still waiting"):
            await checked_launch(None, "alice", homes / "alice", base_env={})
        monkeypatch.setattr(kernel_env, "kernel_launch", kernel_launch)
        launch = await checked_launch(None, "bob", homes / "bob", base_env={})
        assert launch.cwd == str(homes / "bob")
    finally:
        ticker.cancel()
        # Let the hung looks end: a writer's open wakes the readers waiting for one.
        deadline = asyncio.get_running_loop().time() + 10
        while kernel_env._looking and asyncio.get_running_loop().time() < deadline:
            with contextlib.suppress(OSError):  # ENXIO: no reader waits at this moment
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            await asyncio.sleep(0.01)
    assert not kernel_env._looking  # each look is counted until its thread ends


def _reading(fifo: Path) -> Any:
    def launch(*args: Any) -> Any:
        with open(fifo):  # waits for a writer
            pass
        return kernel_launch(*args)

    return launch


def test_a_root_the_gateway_cannot_see_says_so(homes: Path) -> None:
    with pytest.raises(InvalidSettingError, match="cannot see this user's files"):
        working_directory(None, homes / "carol")


def test_a_user_name_that_is_not_a_directory_name_is_refused() -> None:
    assert user_root_of("/home/{username}", "alice") == Path("/home/alice")
    for name in ["..", "a/b", "."]:
        with pytest.raises(InvalidSettingError, match="cannot name a directory"):
            user_root_of("/home/{username}", name)


@pytest.mark.parametrize(
    ("limits", "said"),
    [
        ("memory=" + "9" * 30 + "g", "must be a size"),
        ("pids=\u0661\u0660\u0660", "KERNEL_SANDBOX_LIMITS must be name=value pairs"),
        ("memory=1g,memory=2g", "KERNEL_SANDBOX_LIMITS names memory twice"),
        ("memory=1000t", "above this server's maximum"),
    ],
)
def test_a_kernels_bad_limits_are_refused_before_it_starts(limits: str, said: str) -> None:
    env = {"JUPYTER_SANDBOX_LIMITS": limits}
    with pytest.raises(InvalidSettingError, match=said):
        check_choices(env, SandboxSettings())
