"""A directory watched for changes (file_watch.py, watch_program.py), on a real engine: ready
first, then what is created, modified, removed and renamed, with or without what is under its
subdirectories; closing the watch kills its program in the sandbox; the directory removed, or
the sandbox, ends it with an error; what cannot be watched is refused before any event."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from jupyter_sandbox.protocol.errors import (
    InvalidRequestError,
    SandboxFileError,
    SandboxFileNotFoundError,
    SandboxNotFoundError,
    TooManyWatchesError,
)
from jupyter_sandbox.sandbox.manager import Sandbox, SandboxManager
from jupyter_sandbox.sandbox.operations.file_watch import (
    MAX_LINE,
    LineSplitter,
    parsed,
    watch_directory,
)
from tests.sandbox.snapshots.workspace_files import OWNER, sh

pytestmark = pytest.mark.integration

Events = AsyncGenerator[tuple[str, dict[str, Any]], None]
# A text only the watch program's command line holds (its source is its argument).
IN_THE_PROGRAM = "SandboxFiles.watch_max_entries"


async def next_event(events: Events) -> tuple[str, dict[str, Any]]:
    return await asyncio.wait_for(events.__anext__(), 30)


async def changes_until(events: Events, last: tuple[str, str]) -> list[tuple[str, str]]:
    """(type, path) of each change, up to ``last``."""
    seen: list[tuple[str, str]] = []
    while last not in seen:
        name, data = await next_event(events)
        assert name == "change", (name, data, seen)
        seen.append((data["type"], data["path"]))
    return seen


async def watchers(manager: SandboxManager, sandbox_id: str) -> int:
    listed = await sh(manager, sandbox_id, "cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
    return listed.count(IN_THE_PROGRAM)


async def test_changes_are_seen_as_they_happen_and_closing_stops_the_program(
    manager: SandboxManager, sandbox: Sandbox
) -> None:
    sandbox_id, w = sandbox.sandbox_id, "/workspace/w"
    await sh(manager, sandbox_id, f"mkdir -p {w}/old && echo x > {w}/old/deep")
    events = manager.files.watch(OWNER, sandbox_id, "w")
    assert await next_event(events) == ("ready", {"path": w})
    assert await watchers(manager, sandbox_id) == 1

    await sh(manager, sandbox_id, f"echo a > {w}/f")
    name, change = await next_event(events)
    assert (name, change["type"], change["path"]) == ("change", "created", f"{w}/f")
    assert {key: change["entry"][key] for key in ("name", "type", "size")} == {
        "name": "f",
        "type": "file",
        "size": 2,
    }
    await sh(manager, sandbox_id, f"echo bb >> {w}/f")
    name, change = await next_event(events)
    assert (change["type"], change["path"], change["entry"]["size"]) == ("modified", f"{w}/f", 5)
    # A rename: the old path removed, the new one created. Below a subdirectory: not watched.
    await sh(manager, sandbox_id, f"mv {w}/f {w}/g && echo more >> {w}/old/deep")
    assert await changes_until(events, ("created", f"{w}/g")) == [
        ("removed", f"{w}/f"),
        ("created", f"{w}/g"),
    ]
    await sh(manager, sandbox_id, f"rm {w}/g")
    assert await next_event(events) == (
        "change",
        {"type": "removed", "path": f"{w}/g", "entry": None},
    )

    await events.aclose()
    assert await watchers(manager, sandbox_id) == 0  # killed before aclose returned
    assert manager.files.watch_count == 0


async def test_a_recursive_watch_sees_below_and_ends_when_its_directory_goes(
    manager: SandboxManager, purpose: str
) -> None:
    sandbox_id = (await manager.create(OWNER, runtime="runc", purpose=purpose)).sandbox_id
    w = "/workspace/w"
    await sh(manager, sandbox_id, f"mkdir -p {w}/a")
    events = manager.files.watch(OWNER, sandbox_id, w, recursive=True)
    assert (await next_event(events))[0] == "ready"
    await sh(manager, sandbox_id, f"mkdir -p {w}/a/b && echo x > {w}/a/b/c")
    seen = await changes_until(events, ("created", f"{w}/a/b/c"))
    assert {("created", f"{w}/a/b"), ("created", f"{w}/a/b/c")} <= set(seen), seen
    # The watched directory removed: its removal (after its entries' if a look fell in the
    # middle of rm, and a's modification if it came late), then the error that ends the watch.
    await sh(manager, sandbox_id, f"rm -r {w}")
    seen = await changes_until(events, ("removed", w))
    assert set(seen) <= {("modified", f"{w}/a"), ("removed", w)} | {
        ("removed", f"{w}/{below}") for below in ("a", "a/b", "a/b/c")
    }, seen
    name, error = await next_event(events)
    assert (name, error["code"]) == ("error", "file_not_found"), error
    assert f"the watched directory {w} was removed" in error["message"]
    with pytest.raises(StopAsyncIteration):
        await next_event(events)
    assert manager.files.watch_count == 0


async def test_what_cannot_be_watched_is_refused_before_any_event(
    manager: SandboxManager, purpose: str
) -> None:
    files = manager.files
    sandbox_id = (await manager.create(OWNER, runtime="runc", purpose=purpose)).sandbox_id
    await sh(manager, sandbox_id, "echo x > /workspace/f && mkdir /workspace/many")
    await sh(manager, sandbox_id, "cd /workspace/many && touch 1 2 3 4")
    refused: list[tuple[str, type[Exception], str]] = [
        ("missing", SandboxFileNotFoundError, "no such directory: /workspace/missing"),
        ("f", SandboxFileError, "not a directory: /workspace/f"),
        ("", InvalidRequestError, "path must be a non-empty string"),
    ]
    files.watch_max_entries = 3
    refused.append(("many", SandboxFileError, "more than 3 entries"))
    for path, error, says in refused:
        with pytest.raises(error, match=says):
            await next_event(files.watch(OWNER, sandbox_id, path))
    files.watch_max_entries = 10_000
    files.max_watches = 1
    events = watch_directory(files, OWNER, sandbox_id, heartbeat=0.3)
    assert (await next_event(events))[0] == "ready"
    assert await next_event(events) == ("ping", {})  # nothing changed for a while
    with pytest.raises(TooManyWatchesError, match=r"SandboxFiles\.max_watches"):
        await next_event(files.watch(OWNER, sandbox_id))
    # The sandbox removed (as the idle culler would) ends the watch with an error.
    await manager.remove(OWNER, sandbox_id)
    name, error = await next_event(events)
    assert name == "error", error
    assert (error["code"], error["message"]) == (
        "sandbox_died",
        f"sandbox {sandbox_id} stopped while . was watched",
    )
    with pytest.raises(StopAsyncIteration):
        await next_event(events)
    assert files.watch_count == 0
    with pytest.raises(SandboxNotFoundError):
        await next_event(files.watch(OWNER, sandbox_id))


def test_the_sandboxs_lines_are_checked() -> None:
    entry = {"name": "f", "path": "/w/f", "type": "file", "size": 1, "mode": "0o644"}
    entry["modified"] = "2025-01-01T00:00:00.000000+00:00"
    good = (
        b'{"type": "created", "path": "/w/f", "entry": %s}' % str(entry).replace("'", '"').encode()
    )
    assert parsed(good) == ("change", {"type": "created", "path": "/w/f", "entry": entry})
    for bad in [
        b"not json",
        b"[]",
        b'{"type": "created", "path": "/w/f", "entry": null}',
        b'{"type": "removed", "path": 1, "entry": null}',
        b'{"type": "removed", "path": "/w/f", "entry": 5}',
        b'{"type": "exploded", "path": "/w/f", "entry": null}',
        good.replace(b'"size": 1', b'"size": true'),
        good.replace(b'"type": "file"', b'"type": "fifo"'),
        b"[" * 60_000,  # nested past the stack: json raised RecursionError, not ValueError
        b'{"type": "ready", "path": "/w", "path": "/x"}',  # json.loads kept the last
    ]:
        assert parsed(bad) is None, bad[:80]
    lines = LineSplitter()
    assert lines.feed(b"one\ntw") == [b"one"]
    assert lines.feed(b"o\n" + b"x" * (MAX_LINE + 1)) == [b"two"]
    assert lines.feed(b"still the long one\nthree\n") == [b"three"]
