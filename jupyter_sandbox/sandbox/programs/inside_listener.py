"""Starting a program inside a sandbox that listens on a Unix socket in the sandbox's directory.

The network forwarder (network/control.py) and the port opener (ports.py) are such programs:
the host cannot be reached from inside a sandbox (gVisor runs with ``--host-uds=create``), so
the sandbox listens and the host connects in. Each is started through a detached engine exec as
the sandbox's user (its parent is outside the sandbox, so the kernel supervisor's clean-up at a
restart spares it) and is ready once its socket appears; one that cannot listen writes why
beside it (``<socket>.error``) and exits.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from jupyter_sandbox.protocol.errors import SandboxError
from jupyter_sandbox.sandbox.backends.base import SandboxBackend
from jupyter_sandbox.sandbox.host.sandbox_dir import read_untrusted

START_TIMEOUT = 30.0  # seconds a program has to start listening
EXIT_CHECK_INTERVAL = 0.5  # seconds between two questions to the engine whether it exited
LAST_LINE_BYTES = 4096  # bytes read from the end of a program's error file


async def start_listener(
    backend: SandboxBackend,
    sandbox_id: str,
    argv: list[str],
    socket_path: Path,
    *,
    what: str,
    error: type[SandboxError],
    environment: dict[str, str] | None = None,
) -> None:
    """Start ``argv`` in the sandbox and return once ``socket_path`` (its socket, as the host
    sees it) exists. ``error`` is raised, naming ``what``, if it exits or takes too long."""
    spawn_id = await backend.spawn(sandbox_id, argv, environment=environment or {})
    await wait_until_listening(backend, sandbox_id, spawn_id, socket_path, what=what, error=error)


async def wait_until_listening(
    backend: SandboxBackend,
    sandbox_id: str,
    spawn_id: str,
    socket_path: Path,
    *,
    what: str,
    error: type[SandboxError],
) -> None:
    """Return once ``socket_path`` exists, the socket of the program the engine started as
    ``spawn_id``; ``error``, naming ``what``, if it exits or takes too long."""
    deadline = time.monotonic() + START_TIMEOUT
    checked = time.monotonic()
    # One stat of a local directory entry every 10 ms: microseconds, not worth a thread.
    while not socket_path.exists():  # noqa: ASYNC240
        now = time.monotonic()
        if now > deadline:
            raise error(
                f"the {what} in sandbox {sandbox_id} did not listen within {START_TIMEOUT:g}s"
            )
        if now - checked > EXIT_CHECK_INTERVAL:
            checked = now
            code = await backend.spawned_exit_code(spawn_id)
            if code is not None:
                said = last_line(socket_path.with_name(socket_path.name + ".error"))
                raise error(
                    f"the {what} in sandbox {sandbox_id} exited ({code})"
                    + (f": {said}" if said else "")
                )
        await asyncio.sleep(0.01)


def last_line(path: Path) -> str:
    """The last line a program wrote to ``path`` (at most 300 characters); '' if none. The
    sandbox may have replaced the file (it is in io/, the sandbox's to write): only its last
    bytes are read, and nothing but a regular file, never through a link (read_untrusted)."""
    try:
        written = read_untrusted(path, LAST_LINE_BYTES, tail=True)
        return written.decode(errors="replace").strip().splitlines()[-1][-300:]
    except (OSError, IndexError):
        return ""
