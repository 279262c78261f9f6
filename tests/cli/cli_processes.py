"""Command-line processes the CLI tests start and steer as a person at a terminal would: here,
Ctrl-C once the process has shown it is under way (tests/cli/test_background.py's follower,
tests/cli/test_code.py's run); and the watchers a verb leaves on the host while it works."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from pathlib import Path


async def interrupted(command: list[str], first_line: str) -> tuple[int, str]:
    """Start ``command``, wait until it prints ``first_line`` (its first line of standard
    output, checked), then send it SIGINT, as Ctrl-C does; its exit status and standard error.
    Run in a thread: the test's event loop keeps running the sandboxes meanwhile."""
    return await asyncio.to_thread(_interrupted, command, first_line)


def _interrupted(command: list[str], first_line: str) -> tuple[int, str]:
    with subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        assert process.stdout.readline() == first_line
        process.send_signal(signal.SIGINT)
        return process.wait(timeout=60), process.stderr.read()


def watchers_of(module: str, sandbox_id: str) -> list[int]:
    """The host's watcher processes (``python -m module``: the exec or run watcher a CLI verb
    leaves behind while it works) of ``sandbox_id``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:  # not a process, or ended meanwhile
            continue
        if module.encode() in argv and sandbox_id.encode() in argv:
            found.append(int(entry.name))
    return found
