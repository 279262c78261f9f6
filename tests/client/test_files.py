"""sandbox.files against a real server: bytes written and read back unchanged, seen by the
sandbox's own code, listed and removed, directories made, paths looked up and moved; a missing
file is SandboxFileNotFoundError, one in the way SandboxFileExistsError."""

from __future__ import annotations

import asyncio

import pytest

from jupyter_sandbox.client import (
    FileTooLargeError,
    InvalidRequestError,
    SandboxClient,
    SandboxFileExistsError,
    SandboxFileNotFoundError,
)

pytestmark = [pytest.mark.integration, pytest.mark.runc]


async def test_files_round_trip(client: SandboxClient) -> None:
    blob = bytes(range(256)) * 64  # every byte value, not UTF-8

    def scenario() -> None:
        with client.create(runtime="runc") as sandbox:
            entry = sandbox.files.write("data/blob.bin", blob)  # parents made
            assert (entry.path, entry.type, entry.size) == (
                "/workspace/data/blob.bin",
                "file",
                len(blob),
            )
            assert sandbox.files.read("/workspace/data/blob.bin") == blob
            # A bound as large as the file reads it; one byte less refuses it.
            assert sandbox.files.read("data/blob.bin", max_bytes=len(blob)) == blob
            with pytest.raises(FileTooLargeError, match=f"more than {len(blob) - 1} bytes"):
                sandbox.files.read("data/blob.bin", max_bytes=len(blob) - 1)
            sandbox.files.write("data/note.txt", "héllo\n")  # a str goes as UTF-8
            assert sandbox.files.read_text("data/note.txt") == "héllo\n"
            # What the sandbox's code sees.
            seen = sandbox.run_code("open('data/note.txt', encoding='utf-8').read()")
            assert seen.text == "'héllo\\n'"

            listing = sandbox.files.list("data")
            assert [(e.name, e.type) for e in listing] == [
                ("blob.bin", "file"),
                ("note.txt", "file"),
            ]
            assert [e.name for e in sandbox.files.list() if e.is_dir] == ["data"]

            sandbox.files.remove("data/blob.bin")
            with pytest.raises(SandboxFileNotFoundError) as missing:
                sandbox.files.read("data/blob.bin")
            assert "data/blob.bin" in missing.value.message
            with pytest.raises(SandboxFileNotFoundError):
                sandbox.files.list("no/such/dir")
            with pytest.raises(InvalidRequestError, match="path"):
                sandbox.files.remove("")  # the server's own message names the argument
            sandbox.files.remove("data")  # a directory, with all it holds
            assert sandbox.files.list() == []
        assert client.list() == []

    await asyncio.to_thread(scenario)


async def test_directories_look_ups_and_moves(client: SandboxClient) -> None:
    def scenario() -> None:
        with client.create(runtime="runc") as sandbox:
            files = sandbox.files
            made = files.make_dir("runs/1")
            assert (made.path, made.is_dir) == ("/workspace/runs/1", True)
            assert files.make_dir("runs").is_dir  # already there: fine
            assert not files.exists("runs/1/log.txt")
            files.write("runs/1/log.txt", "done\n")
            assert files.exists("runs/1/log.txt")
            assert files.info("runs/1/log.txt").size == 5
            with pytest.raises(SandboxFileExistsError):
                files.make_dir("runs/1/log.txt")

            moved = files.move("runs/1", "archive/run-1")
            assert (moved.path, moved.type) == ("/workspace/archive/run-1", "directory")
            assert files.read_text("archive/run-1/log.txt") == "done\n"
            assert not files.exists("runs/1")
            files.write("latest.txt", "old")
            with pytest.raises(SandboxFileExistsError, match="overwrite"):
                files.move("archive/run-1/log.txt", "latest.txt")
            files.move("archive/run-1/log.txt", "latest.txt", overwrite=True)
            assert files.read_text("latest.txt") == "done\n"
            with pytest.raises(SandboxFileNotFoundError):
                files.info("archive/run-1/log.txt")

    await asyncio.to_thread(scenario)
