"""sandbox.files.watch and watch_dir against a real server: changes come as FileChange, closing
(from the iterating thread or another) stops the watcher in the sandbox, a missing directory is
SandboxFileNotFoundError, and a watch that ends on its own raises why."""

from __future__ import annotations

import asyncio
import queue
import time

import pytest

from jupyter_sandbox.client import (
    FileChange,
    SandboxClient,
    SandboxFileNotFoundError,
)
from jupyter_sandbox.client.sandbox import Sandbox

pytestmark = [pytest.mark.integration, pytest.mark.runc]

IN_THE_PROGRAM = "SandboxFiles.watch_max_entries"  # only the watcher's command line holds it


def watchers(sandbox: Sandbox) -> int:
    listed = sandbox.run("cat /proc/[0-9]*/cmdline | tr '\\0' ' '").stdout
    return listed.count(IN_THE_PROGRAM)


def no_watchers_within(sandbox: Sandbox, seconds: float = 15.0) -> bool:
    """Whether the watchers in the sandbox are gone within ``seconds``: the server hears of a
    closed watch by its hang-up, on its own time, then stops the watcher."""
    deadline = time.monotonic() + seconds
    while watchers(sandbox) != 0:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


async def test_watch_and_watch_dir(client: SandboxClient) -> None:
    def scenario() -> None:
        with client.create(runtime="runc") as sandbox:
            with pytest.raises(SandboxFileNotFoundError, match="no such directory"):
                sandbox.files.watch("missing")
            sandbox.files.make_dir("w")
            with sandbox.files.watch("w") as watch:
                assert watch.path == "/workspace/w"
                sandbox.files.write("w/a.txt", "hi")
                change = next(watch)
                assert (change.type, change.path) == ("created", "/workspace/w/a.txt")
                assert change.entry is not None
                assert change.entry.size == 2
                assert watchers(sandbox) == 1
            assert no_watchers_within(sandbox)  # closed: the server stopped it
            assert list(watch) == []

            seen: queue.Queue[FileChange] = queue.Queue()
            ended: queue.Queue[BaseException | None] = queue.Queue()
            handle = sandbox.files.watch_dir("w", seen.put, on_exit=ended.put)
            sandbox.files.remove("w/a.txt")
            change = seen.get(timeout=30)
            assert (change.type, change.path, change.entry) == (
                "removed",
                "/workspace/w/a.txt",
                None,
            )
            started = time.monotonic()
            handle.stop()  # from another thread than the one reading
            assert time.monotonic() - started < 5
            assert not handle.running
            assert handle.error is None
            assert ended.get(timeout=5) is None
            assert no_watchers_within(sandbox)  # the server heard the hang-up, and stopped it

            # The directory removed: the watch ends with the error saying so.
            handle = sandbox.files.watch_dir("w", seen.put, on_exit=ended.put)
            sandbox.files.remove("w")
            error = ended.get(timeout=30)
            assert isinstance(error, SandboxFileNotFoundError), error
            assert "the watched directory /workspace/w was removed" in str(error)
            assert seen.get(timeout=5).path == "/workspace/w"

    await asyncio.to_thread(scenario)
