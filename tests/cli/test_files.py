"""`jupyter sandbox files ls|stat|get|put|mkdir|mv|rm|watch` as a person runs it."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from asyncio.subprocess import PIPE
from collections.abc import Callable
from pathlib import Path

import pytest

from jupyter_sandbox.sandbox.manager import SandboxManager

pytestmark = [pytest.mark.integration, pytest.mark.runc]
JUPYTER = [sys.executable, "-m", "jupyter_sandbox.cli", "files"]


async def files_cli(
    *args: str, state_dir: Path, stdin: bytes = b"", cwd: Path | None = None
) -> subprocess.CompletedProcess[bytes]:
    command = [*JUPYTER, *args, f"--SandboxSettings.state_dir={state_dir}", "--owner=alice"]
    return await asyncio.to_thread(
        subprocess.run, command, input=stdin, capture_output=True, timeout=300, cwd=cwd
    )


async def test_put_ls_get_rm(
    manager: SandboxManager, state_dir: Path, tmp_path: Path, purpose: str
) -> None:
    sandbox = await manager.create("alice", runtime="runc", purpose=purpose)
    sandbox_id = sandbox.sandbox_id
    local = tmp_path / "local.bin"
    local.write_bytes(os.urandom(100_000))

    put = await files_cli("put", sandbox_id, str(local), "in/data.bin", state_dir=state_dir)
    assert put.returncode == 0, put.stderr
    assert put.stdout.decode() == "/workspace/in/data.bin (100000 bytes)\n"
    piped = await files_cli("put", sandbox_id, "-", "in/note.txt", state_dir=state_dir, stdin=b"hi")
    assert piped.returncode == 0, piped.stderr

    listed = await files_cli("ls", sandbox_id, "in", state_dir=state_dir)
    lines = listed.stdout.decode().splitlines()
    assert lines[0] == "/workspace/in"
    assert [line.split()[-1] for line in lines[1:]] == ["data.bin", "note.txt"]
    assert (
        (await files_cli("ls", sandbox_id, state_dir=state_dir)).stdout.decode().endswith("in/\n")
    )

    got = await files_cli("get", sandbox_id, "in/data.bin", state_dir=state_dir)
    assert got.stdout == local.read_bytes()
    saved = await files_cli(
        "get", sandbox_id, "in/note.txt", "--output=copy.txt", state_dir=state_dir, cwd=tmp_path
    )
    assert saved.returncode == 0, saved.stderr
    assert (tmp_path / "copy.txt").read_bytes() == b"hi"

    removed = await files_cli("rm", sandbox_id, "in", state_dir=state_dir)
    assert removed.returncode == 0, removed.stderr
    missing = await files_cli(
        "get", sandbox_id, "in/note.txt", "--output=gone.txt", state_dir=state_dir, cwd=tmp_path
    )
    assert missing.returncode == 1
    assert missing.stderr.decode() == (
        f"error: sandbox {sandbox_id}: no such file or directory: /workspace/in/note.txt\n"
    )
    assert sorted(os.listdir(tmp_path)) == ["copy.txt", "local.bin"]  # no half file left


async def test_wrong_arguments_print_the_usage(state_dir: Path) -> None:
    result = await files_cli("put", "0123456789ab", "only-two", state_dir=state_dir)
    assert result.returncode == 2
    assert b"usage: jupyter sandbox files put SANDBOX_ID LOCAL_FILE PATH" in result.stderr


async def test_mkdir_stat_and_mv(manager: SandboxManager, state_dir: Path, purpose: str) -> None:
    sandbox = await manager.create("alice", runtime="runc", purpose=purpose)
    sandbox_id = sandbox.sandbox_id

    async def run(*args: str) -> tuple[int, str, str]:
        done = await files_cli(*args, state_dir=state_dir)
        return done.returncode, done.stdout.decode(), done.stderr.decode()

    assert await run("mkdir", sandbox_id, "out/raw") == (0, "/workspace/out/raw\n", "")
    assert await run("mkdir", sandbox_id, "out") == (0, "/workspace/out (already there)\n", "")
    status, out, _ = await run("stat", sandbox_id, "out")
    assert (status, out.split()[0], out.split()[-1]) == (0, "0o755", "/workspace/out/")
    status, _, err = await run("stat", sandbox_id, "nothing")
    assert (status, err) == (
        1,
        f"error: sandbox {sandbox_id}: no such file or directory: /workspace/nothing\n",
    )

    await manager.files.write("alice", sandbox_id, "a.txt", b"a")
    await manager.files.write("alice", sandbox_id, "b.txt", b"b")
    assert await run("mv", sandbox_id, "a.txt", "out/raw/a.txt") == (
        0,
        "/workspace/out/raw/a.txt\n",
        "",
    )
    status, _, err = await run("mv", sandbox_id, "b.txt", "out/raw/a.txt")
    assert status == 1, err
    assert "/workspace/out/raw/a.txt already exists" in err
    assert "overwrite" in err
    assert (await run("mv", sandbox_id, "b.txt", "out/raw/a.txt", "--overwrite"))[0] == 0
    assert await manager.files.read("alice", sandbox_id, "out/raw/a.txt") == b"b"
    status, _, err = await run("mv", sandbox_id, "just-one-path")
    assert (status, err) == (
        2,
        "usage: jupyter sandbox files mv SANDBOX_ID PATH NEW_PATH [--overwrite]\n",
    )


async def test_watch_prints_each_change_until_ctrl_c(
    manager: SandboxManager, state_dir: Path, purpose: str
) -> None:
    sandbox_id = (await manager.create("alice", runtime="runc", purpose=purpose)).sandbox_id
    missing = await files_cli("watch", sandbox_id, "missing", state_dir=state_dir)
    assert missing.returncode == 1
    assert missing.stderr.decode().endswith("no such directory: /workspace/missing\n")
    options = (f"--SandboxSettings.state_dir={state_dir}", "--owner=alice", "--recursive")
    watching = await asyncio.create_subprocess_exec(
        *JUPYTER, "watch", sandbox_id, *options, stdout=PIPE, stderr=PIPE
    )
    assert watching.stdout is not None
    assert watching.stderr is not None
    said = await asyncio.wait_for(watching.stderr.readline(), 60)
    assert said == b"watching /workspace (Ctrl-C stops)\n"
    await manager.files.write("alice", sandbox_id, "new/file.txt", b"x")
    lines = [await asyncio.wait_for(watching.stdout.readline(), 30) for _ in range(2)]
    assert lines == [b"created   /workspace/new\n", b"created   /workspace/new/file.txt\n"]
    watching.send_signal(signal.SIGINT)
    assert await asyncio.wait_for(watching.wait(), 30) == 130
    ran = await manager.exec("alice", sandbox_id, ["sh", "-c", "cat /proc/[0-9]*/cmdline"])
    assert b"sandbox-init" in ran.stdout  # the listing works
    assert b"SandboxFiles.watch_max_entries" not in ran.stdout  # the watcher was killed


# A file name the sandbox's code chose: retitle the window, clear the screen, overwrite the line.
HOSTILE_NAME = "x\x1b]0;owned\x07\x1b[2J\rok\u202e"
HOSTILE_SHOWN = "x\\x1b]0;owned\\x07\\x1b[2J\\rok\\u202e"


@pytest.mark.checklist(
    row=64,
    attack="a file named with terminal escape sequences (OSC title, clear screen, CR, RLO) "
    "listed, shown and named in an error by `jupyter sandbox files`",
    expected="every control character printed escaped (\\x1b...); nothing reaches the terminal raw",
)
async def test_file_names_are_printed_with_their_controls_escaped(
    manager: SandboxManager,
    state_dir: Path,
    runtime: str,
    purpose: str,
    observe: Callable[..., None],
) -> None:
    sandbox = await manager.create("alice", runtime=runtime, purpose=purpose)
    sandbox_id = sandbox.sandbox_id
    await manager.files.write("alice", sandbox_id, f"dir/{HOSTILE_NAME}", b"!")

    listed = await files_cli("ls", sandbox_id, "dir", state_dir=state_dir)
    stat = await files_cli("stat", sandbox_id, f"dir/{HOSTILE_NAME}", state_dir=state_dir)
    missing = await files_cli("get", sandbox_id, f"{HOSTILE_NAME}/gone", state_dir=state_dir)

    assert (listed.returncode, stat.returncode, missing.returncode) == (0, 0, 1), missing.stderr
    assert listed.stdout.decode().splitlines()[1].endswith(f"  {HOSTILE_SHOWN}")
    assert stat.stdout.decode().rstrip("\n").endswith(f"/workspace/dir/{HOSTILE_SHOWN}")
    assert f"/workspace/{HOSTILE_SHOWN}/gone" in missing.stderr.decode()
    printed = listed.stdout + stat.stdout + missing.stdout + missing.stderr
    controls = sorted({chr(byte) for byte in printed if byte < 0x20 and byte != 0x0A})
    assert controls == []
    assert "\u202e" not in printed.decode()
    observe("ls, stat and an error named the file with \\x1b, \\x07, \\r, \\u202e escaped", 3)
