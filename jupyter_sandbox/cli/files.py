"""``jupyter sandbox files ls|stat|get|put|mkdir|mv|rm|watch``: the files inside a running
sandbox.

Each verb is an OwnerCommand (cli/owner.py) using SandboxManager.files (sandbox/operations/files.py): the
work runs inside the sandbox as its user. Paths in the sandbox are relative to /workspace, or
absolute; ``-`` as a local file is standard input or output. The ``files`` group that holds
them is cli/main.py's FilesApp.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from traitlets import Bool, Unicode

from jupyter_sandbox.cli.owner import OwnerCommand
from jupyter_sandbox.cli.text import shown
from jupyter_sandbox.sandbox.host.sandbox_dir import replaced_atomically
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.operations.files import SandboxFiles
from jupyter_sandbox.sandbox.settings import SandboxSettings

INTERRUPTED = 130  # Ctrl-C, as a shell has it (SIGINT)


class _FilesCommand(OwnerCommand):
    classes = [SandboxSettings, SandboxFiles]
    group = "files"


class LsApp(_FilesCommand):
    description = "List a directory in a running sandbox (default: /workspace)."
    usage = "ls SANDBOX_ID [PATH]"

    async def run(
        self, manager: SandboxManager, owner: str, sandbox_id: str, path: str = "."
    ) -> int:
        listing = await manager.files.list(owner, sandbox_id, path)
        print(shown(listing["path"]))
        for entry in listing["entries"]:
            print(_line(entry, entry["name"]))
        return 0


class StatApp(_FilesCommand):
    description = "Show one path in a running sandbox (exit status 1 when nothing is there)."
    usage = "stat SANDBOX_ID PATH"

    async def run(self, manager: SandboxManager, owner: str, sandbox_id: str, path: str) -> int:
        print(_line(await manager.files.info(owner, sandbox_id, path)))
        return 0


class GetApp(_FilesCommand):
    description = "Copy a file out of a running sandbox (to standard output by default)."
    usage = "get SANDBOX_ID PATH [--output=LOCAL_FILE]"
    output = Unicode("-", config=True, help="Where to write the file ('-': standard output).")
    aliases = {"output": "GetApp.output"}

    async def run(self, manager: SandboxManager, owner: str, sandbox_id: str, path: str) -> int:
        data = await manager.files.read(owner, sandbox_id, path)
        if self.output == "-":
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
            return 0
        await asyncio.to_thread(_write_local, Path(self.output), data)
        return 0


class PutApp(_FilesCommand):
    description = "Copy a local file (or '-': standard input) into a running sandbox, whole."
    usage = "put SANDBOX_ID LOCAL_FILE PATH"

    async def run(
        self, manager: SandboxManager, owner: str, sandbox_id: str, local: str, path: str
    ) -> int:
        try:
            data = await asyncio.to_thread(_read_local, local)
        except OSError as exc:
            print(f"error: cannot read {local}: {exc.strerror}", file=sys.stderr)
            return 1
        entry = await manager.files.write(owner, sandbox_id, path, data)
        print(f"{shown(entry['path'])} ({entry['size']} bytes)")
        return 0


class MkdirApp(_FilesCommand):
    description = "Make a directory, with its missing parents, in a running sandbox."
    usage = "mkdir SANDBOX_ID PATH"

    async def run(self, manager: SandboxManager, owner: str, sandbox_id: str, path: str) -> int:
        entry = await manager.files.make_directory(owner, sandbox_id, path)
        print(shown(entry["path"]) + ("" if entry.get("created") else " (already there)"))
        return 0


class MvApp(_FilesCommand):
    description = "Move (rename) a file or directory in a running sandbox."
    usage = "mv SANDBOX_ID PATH NEW_PATH [--overwrite]"
    overwrite = Bool(
        False,
        config=True,
        help="Replace what is at NEW_PATH (a file, or an empty directory); refused otherwise.",
    )
    flags = {"overwrite": ({"MvApp": {"overwrite": True}}, "Replace what is at NEW_PATH.")}

    async def run(
        self, manager: SandboxManager, owner: str, sandbox_id: str, path: str, target: str
    ) -> int:
        entry = await manager.files.move(owner, sandbox_id, path, target, self.overwrite)
        print(shown(entry["path"]))
        return 0


class RmApp(_FilesCommand):
    description = "Remove a file, or a directory with all it holds, in a running sandbox."
    usage = "rm SANDBOX_ID PATH"

    async def run(self, manager: SandboxManager, owner: str, sandbox_id: str, path: str) -> int:
        await manager.files.remove(owner, sandbox_id, path)
        return 0


class WatchApp(_FilesCommand):
    description = (
        "Print each change in a directory of a running sandbox as it happens (created, "
        "modified, removed, then the path), until Ctrl-C (exit status 130)."
    )
    usage = "watch SANDBOX_ID [PATH] [--recursive]"
    recursive = Bool(False, config=True, help="Also what is under its subdirectories.")
    flags = {"recursive": ({"WatchApp": {"recursive": True}}, "Also watch subdirectories.")}

    def start(self) -> None:
        try:
            super().start()
        except KeyboardInterrupt:  # asyncio.run closed the watch: the watcher was killed
            self.exit(INTERRUPTED)

    async def run(
        self, manager: SandboxManager, owner: str, sandbox_id: str, path: str = "."
    ) -> int:
        events = manager.files.watch(owner, sandbox_id, path, self.recursive)
        try:
            async for name, data in events:
                if name == "ready":
                    print(f"watching {shown(data['path'])} (Ctrl-C stops)", file=sys.stderr)
                elif name == "change":
                    print(f"{data['type']:<8}  {shown(data['path'])}", flush=True)
                elif name == "error":
                    print(f"error: {shown(data['message'])}", file=sys.stderr)
                    return 1
        finally:
            await events.aclose()
        return 1  # never reached: a watch ends with an error event, or Ctrl-C


def _line(entry: dict[str, Any], name: str | None = None) -> str:
    """An entry as ls shows it: mode, size, modified (UTC, to the second), name (a directory's
    with a slash); stat shows the whole path. The name is the sandbox's to choose: escaped."""
    named = shown(entry["path"] if name is None else name) + (
        "/" if entry["type"] == "directory" else ""
    )
    # The other fields come from a program in the sandbox too (files.py): escaped as well.
    mode, size, modified = (shown(str(entry[key])) for key in ("mode", "size", "modified"))
    return f"{mode:>7}  {size:>12}  {modified[:19]}  {named}"


def _read_local(local: str) -> bytes:
    return sys.stdin.buffer.read() if local == "-" else Path(local).read_bytes()


def _write_local(target: Path, data: bytes) -> None:
    """A failure leaves no half-written file where a whole one is expected."""
    with replaced_atomically(target) as out:
        out.write(data)
