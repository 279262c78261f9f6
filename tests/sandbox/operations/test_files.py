"""Files in a running sandbox (files.py), on a real engine and both runtimes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jupyter_sandbox.protocol.errors import (
    FileTooLargeError,
    InvalidRequestError,
    SandboxConflictError,
    SandboxFileError,
    SandboxFileExistsError,
    SandboxFileNotFoundError,
    SandboxFilePermissionError,
    SandboxFileTypeError,
    SandboxNotFoundError,
)
from jupyter_sandbox.sandbox.manager import Sandbox, SandboxManager
from jupyter_sandbox.sandbox.operations.file_checks import check_path, reported_error
from jupyter_sandbox.sandbox.operations.files import _decoded
from tests.sandbox.snapshots.workspace_files import OWNER, sh

pytestmark = pytest.mark.integration


async def test_write_list_read_and_remove(manager: SandboxManager, sandbox: Sandbox) -> None:
    files, sandbox_id = manager.files, sandbox.sandbox_id
    data = os.urandom(3 * 2**20) + b"\0\n\r"
    written = await files.write(OWNER, sandbox_id, "new/données/é x.bin", data)
    assert written["path"] == "/workspace/new/données/é x.bin"
    assert (written["type"], written["size"], written["mode"]) == ("file", len(data), "0o644")
    assert await files.read(OWNER, sandbox_id, "/workspace/new/données/é x.bin") == data

    await sh(manager, sandbox_id, "cd /workspace/new && ln -s données link && mkdir empty")
    listing = await files.list(OWNER, sandbox_id, "new")
    assert listing["path"] == "/workspace/new"
    kinds = {entry["name"]: entry["type"] for entry in listing["entries"]}
    assert kinds == {"données": "directory", "empty": "directory", "link": "symlink"}
    assert [e["name"] for e in (await files.list(OWNER, sandbox_id))["entries"]] == ["new"]

    await files.remove(OWNER, sandbox_id, "new")
    assert (await files.list(OWNER, sandbox_id))["entries"] == []


async def test_a_replaced_file_keeps_its_mode_and_is_never_half_written(
    manager: SandboxManager, sandbox: Sandbox
) -> None:
    files, sandbox_id = manager.files, sandbox.sandbox_id
    await sh(manager, sandbox_id, "printf old > /workspace/run.sh && chmod 750 /workspace/run.sh")
    entry = await files.write(OWNER, sandbox_id, "run.sh", b"#!/bin/sh\necho new\n")
    assert entry["mode"] == "0o750"
    assert await sh(manager, sandbox_id, "sh /workspace/run.sh") == "new\n"
    # Written aside and renamed: no temporary file is left behind.
    assert [e["name"] for e in (await files.list(OWNER, sandbox_id))["entries"]] == ["run.sh"]


async def test_failures_name_the_path_and_change_nothing(
    manager: SandboxManager, sandbox: Sandbox
) -> None:
    files, sandbox_id = manager.files, sandbox.sandbox_id
    await sh(
        manager, sandbox_id, "mkdir /workspace/d && printf x > /workspace/f && mkfifo /workspace/p"
    )
    with pytest.raises(SandboxFileNotFoundError, match="/workspace/missing"):
        await files.read(OWNER, sandbox_id, "missing")
    with pytest.raises(SandboxFileTypeError, match="/workspace/d is not a regular file"):
        await files.read(OWNER, sandbox_id, "d")
    with pytest.raises(SandboxFileError, match="/workspace/p is not a regular file"):
        await files.read(OWNER, sandbox_id, "p")  # a FIFO: refused, not waited on
    with pytest.raises(SandboxFileTypeError, match="not a directory: /workspace/f"):
        await files.list(OWNER, sandbox_id, "f")
    with pytest.raises(SandboxFileTypeError, match="/workspace/d is a directory"):
        await files.write(OWNER, sandbox_id, "d", b"x")
    # The image's own files are the sandbox's to read, never to change.
    assert b"root:" in await files.read(OWNER, sandbox_id, "/etc/passwd")
    with pytest.raises(SandboxFilePermissionError, match="/etc/passwd"):
        await files.write(OWNER, sandbox_id, "/etc/passwd", b"x")
    for root in ("/workspace/", ".", "/workspace/d/..", "/"):
        with pytest.raises(SandboxFileError, match="itself cannot be removed"):
            await files.remove(OWNER, sandbox_id, root)
    names = [e["name"] for e in (await files.list(OWNER, sandbox_id))["entries"]]
    assert names == ["d", "f", "p"]
    assert await files.read(OWNER, sandbox_id, "f") == b"x"


async def test_look_up_make_directories_and_move(manager: SandboxManager, sandbox: Sandbox) -> None:
    files, sandbox_id = manager.files, sandbox.sandbox_id
    with pytest.raises(SandboxFileNotFoundError, match="/workspace/nothing"):
        await files.info(OWNER, sandbox_id, "nothing")
    made = await files.make_directory(OWNER, sandbox_id, "a/b/c")
    assert (made["path"], made["type"], made["created"]) == ("/workspace/a/b/c", "directory", True)
    assert (await files.make_directory(OWNER, sandbox_id, "a/b"))["created"] is False
    await files.write(OWNER, sandbox_id, "a/x.txt", b"x")
    with pytest.raises(
        SandboxFileExistsError, match=r"/workspace/a/x\.txt exists and is not a dir"
    ):
        await files.make_directory(OWNER, sandbox_id, "a/x.txt")
    await sh(manager, sandbox_id, "ln -s a/x.txt /workspace/link")
    link = await files.info(OWNER, sandbox_id, "link")
    assert (link["name"], link["type"]) == ("link", "symlink")  # the link itself, not followed

    moved = await files.move(OWNER, sandbox_id, "a/x.txt", "new/place/y.txt")  # parents made
    assert (moved["path"], moved["type"], moved["size"]) == (
        "/workspace/new/place/y.txt",
        "file",
        1,
    )
    with pytest.raises(SandboxFileNotFoundError, match=r"/workspace/a/x\.txt"):
        await files.info(OWNER, sandbox_id, "a/x.txt")
    await files.write(OWNER, sandbox_id, "z.txt", b"z")
    with pytest.raises(SandboxFileExistsError, match=r"/workspace/z\.txt already exists"):
        await files.move(OWNER, sandbox_id, "new/place/y.txt", "z.txt")
    assert await files.read(OWNER, sandbox_id, "z.txt") == b"z"  # refused: nothing changed
    await files.move(OWNER, sandbox_id, "new/place/y.txt", "z.txt", overwrite=True)
    assert await files.read(OWNER, sandbox_id, "z.txt") == b"x"

    await files.move(OWNER, sandbox_id, "a", "new/a")  # a directory, with what it holds
    assert (await files.info(OWNER, sandbox_id, "new/a/b/c"))["type"] == "directory"
    with pytest.raises(SandboxFileError, match="cannot move /workspace/new into itself"):
        await files.move(OWNER, sandbox_id, "new", "new/a/inside")
    with pytest.raises(SandboxFileExistsError, match="not empty"):
        await files.move(OWNER, sandbox_id, "new/place", "new/a", overwrite=True)
    with pytest.raises(SandboxFileError, match="/workspace itself cannot be moved"):
        await files.move(OWNER, sandbox_id, ".", "elsewhere")
    with pytest.raises(SandboxFileError, match="/workspace itself cannot be replaced"):
        await files.move(OWNER, sandbox_id, "z.txt", "/workspace", overwrite=True)
    with pytest.raises(SandboxFileNotFoundError, match="/workspace/gone"):
        await files.move(OWNER, sandbox_id, "gone", "there")
    assert not await sh(manager, sandbox_id, "ls /workspace/there 2>/dev/null; true")


async def test_a_move_between_file_systems_copies_then_removes(
    manager: SandboxManager, sandbox: Sandbox
) -> None:
    # /tmp is the sandbox's own tmpfs, /workspace a mount: rename(2) cannot cross them.
    files, sandbox_id = manager.files, sandbox.sandbox_id
    await files.write(OWNER, sandbox_id, "tree/deep/f.bin", b"\0" * 1000)
    await sh(manager, sandbox_id, "chmod 700 /workspace/tree/deep")
    out = await files.move(OWNER, sandbox_id, "tree", "/tmp/tree")
    assert out["path"] == "/tmp/tree"
    assert await files.read(OWNER, sandbox_id, "/tmp/tree/deep/f.bin") == b"\0" * 1000
    assert (await files.info(OWNER, sandbox_id, "/tmp/tree/deep"))["mode"] == "0o700"
    assert (await files.list(OWNER, sandbox_id))["entries"] == []
    await files.write(OWNER, sandbox_id, "tree", b"in the way")
    await files.move(OWNER, sandbox_id, "/tmp/tree/deep/f.bin", "tree", overwrite=True)
    assert await files.read(OWNER, sandbox_id, "tree") == b"\0" * 1000


@pytest.mark.runc
async def test_caps_owners_and_a_paused_sandbox(manager: SandboxManager, purpose: str) -> None:
    sandbox = await manager.create(OWNER, runtime="runc", purpose=purpose)
    files, sandbox_id = manager.files, sandbox.sandbox_id
    files.max_bytes = 2**20
    await sh(manager, sandbox_id, "head -c 1048577 /dev/zero > /workspace/big")
    with pytest.raises(FileTooLargeError, match=r"SandboxFiles\.max_bytes"):
        await files.read(OWNER, sandbox_id, "big")
    with pytest.raises(FileTooLargeError):
        await files.write(OWNER, sandbox_id, "other", bytes(2**20 + 1))
    with pytest.raises(SandboxFileNotFoundError):
        await files.read(OWNER, sandbox_id, "other")
    with pytest.raises(SandboxNotFoundError):
        await files.list("mallory", sandbox_id)
    await manager.pause(OWNER, sandbox_id)
    with pytest.raises(SandboxConflictError, match=r"paused.*resume it first"):
        await files.list(OWNER, sandbox_id)


def test_paths_that_cannot_name_a_file_are_refused() -> None:
    for bad in ("", "a\0b", "x" * 4097, "\udcff", None, 3):
        with pytest.raises(InvalidRequestError):
            check_path(bad)
    assert check_path("../etc/hosts") == "../etc/hosts"  # the sandbox's own view: its business


async def test_files_of_a_copy_on_write_workspace_stay_in_the_sandbox(
    manager: SandboxManager, runtime: str, purpose: str, tmp_path: Path
) -> None:
    # What a notebook wrote under copy-on-write never reaches the host: this is how it is
    # fetched, and how the host's file is seen from inside without being changed.
    (tmp_path / "data.csv").write_text("a,b\n1,2\n")
    sandbox = await manager.create(
        OWNER, runtime=runtime, launch_dir=str(tmp_path), purpose=purpose
    )
    files, sandbox_id = manager.files, sandbox.sandbox_id
    assert await files.read(OWNER, sandbox_id, "data.csv") == b"a,b\n1,2\n"
    await files.write(OWNER, sandbox_id, "data.csv", b"changed")
    await files.write(OWNER, sandbox_id, "out/result.txt", b"42")
    assert await files.read(OWNER, sandbox_id, "out/result.txt") == b"42"
    assert await files.read(OWNER, sandbox_id, "data.csv") == b"changed"
    assert (tmp_path / "data.csv").read_text() == "a,b\n1,2\n"
    assert os.listdir(tmp_path) == ["data.csv"]


@pytest.mark.parametrize(
    "report",
    [
        b"[" * 60_000,
        b'{"a": ' * 30_000,
        b"not json",
        b"[1]",
        b'"text"',
        b"",
        # Read as floats the API's JSON answer cannot carry (strict_json.loads refuses them).
        b'{"size": NaN}',
        b'{"size": 1e999}',
        b'{"entries": [], "entries": [{"name": "planted"}]}',
    ],
)
def test_a_report_the_host_cannot_read_is_a_file_error(report: bytes) -> None:
    """The program's reports are the sandbox's to write: JSON nested past the stack raised
    RecursionError (a 500), where anything unreadable is a SandboxFileError."""
    with pytest.raises(SandboxFileError, match="answered something unreadable"):
        _decoded(report, "0123456789ab")
    error = reported_error(report, "0123456789ab")
    assert type(error) is SandboxFileError
    assert len(error.message) < 600
