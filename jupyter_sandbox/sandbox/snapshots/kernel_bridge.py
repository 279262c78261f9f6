"""The host's side of the kernel bridge of a sandbox made for memory snapshots.

The bridge (images/python/sandbox_bridge.py, in the sandbox's supervisor) owns the host-facing
sockets of a kernel that listens on TCP inside the sandbox. Before a checkpoint the host asks
it to close them (gVisor cannot save a sandbox holding host sockets); after a restore, to bind a
new generation of them. Requests go through the sandbox directory, the only place both sides
reach: the host writes ``bridge-request`` and waits for ``bridge-state`` to echo its id.

``bridge-state`` is written by the sandbox, so the host reads it like any file there: no
symlinks followed, a few KB at most, and only the id and error it expects are believed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from typing import Any

from jupyter_sandbox.protocol import strict_json
from jupyter_sandbox.protocol.snapshot_errors import SnapshotFailedError
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory, read_untrusted

# Seconds a request may wait for its answer; the bridge looks every 20 ms.
ANSWER_TIMEOUT = 10.0
POLL_SECONDS = 0.01
MAX_ANSWER_BYTES = 4096


async def close_bridge(directory: SandboxDirectory) -> None:
    """End every host socket of the sandbox's kernel (its TCP listeners inside stay)."""
    await _ask(directory, {"action": "close"})


async def open_bridge(directory: SandboxDirectory, generation: int) -> None:
    """Bind the host sockets of kernel ``generation`` (paths: socket_prefix_of(generation))."""
    await _ask(directory, {"action": "open", "generation": generation})


async def _ask(directory: SandboxDirectory, request: dict[str, Any]) -> None:
    request_id = secrets.token_hex(8)
    directory.write_for_sandbox("bridge-request", json.dumps({**request, "id": request_id}))
    deadline = time.monotonic() + ANSWER_TIMEOUT
    while time.monotonic() < deadline:
        answer = _read_answer(directory)
        if answer.get("id") == request_id:
            if answer.get("error"):
                raise SnapshotFailedError(
                    f"the sandbox's kernel bridge could not {request['action']} its sockets: "
                    f"{str(answer['error'])[:200]}"
                )
            return
        await asyncio.sleep(POLL_SECONDS)
    raise SnapshotFailedError(
        f"the sandbox's kernel bridge did not answer '{request['action']}' within "
        f"{ANSWER_TIMEOUT:g}s (its supervisor is stuck, or the sandbox stopped)"
    )


def _read_answer(directory: SandboxDirectory) -> dict[str, Any]:
    path = directory.io / "bridge-state"
    # The sandbox can write anything there: MalformedJSONError (a ValueError) covers JSON nested
    # past the stack, which json.loads raised as RecursionError, and NaN or Infinity.
    with contextlib.suppress(OSError, ValueError):
        written = read_untrusted(path, MAX_ANSWER_BYTES)
        answer = strict_json.loads(written, max_bytes=MAX_ANSWER_BYTES)
        if isinstance(answer, dict):
            return answer
    return {}
