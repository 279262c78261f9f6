"""Context ids: names for live interpreters, and the lock that lets one kernel hold each.

A context id names a sandbox whose kernel keeps its variables between kernel processes: the
same owner and the same context id find the same sandbox again. One kernel process holds a
context at a time; the hold is an ``flock`` on a file under the state directory, so the
operating system releases it when the process ends in any way, SIGKILL included.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from pathlib import Path

from jupyter_sandbox.protocol.errors import ContextBusyError, InvalidSettingError
from jupyter_sandbox.sandbox.host.process_lock import ProcessLock
from jupyter_sandbox.sandbox.host.state_record import SandboxState

_CONTEXT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def check_context(context: str) -> str:
    if not _CONTEXT.match(context):
        raise InvalidSettingError(
            f"context id {context!r} is invalid: use 1 to 64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return context


def lock_path(state_dir: Path, owner: str, context: str) -> Path:
    """Where the lock of ``owner``'s ``context`` lives (owners never share a file)."""
    owner_key = hashlib.sha256(owner.encode()).hexdigest()[:16]
    return state_dir / "locks" / f"{owner_key}.{context}.lock"


class ContextLock:
    """An exclusive, process-lifetime hold on one owner's context."""

    def __init__(self, state_dir: Path, owner: str, context: str) -> None:
        self.context = check_context(context)
        self.path = lock_path(state_dir, owner, context)
        self._lock = ProcessLock(self.path)

    def acquire(self) -> None:
        """Take the context, or raise ContextBusyError naming it and the holder's pid."""
        if not self._lock.try_acquire(note=str(os.getpid())):
            holder = self._lock.note_of_holder() or "unknown"
            raise ContextBusyError(
                f"context '{self.context}' is in use by another kernel (pid {holder}); shut that "
                "kernel down first, or start this one with another JUPYTER_SANDBOX_CONTEXT"
            )

    def release(self) -> None:
        """Let the context go and remove its lock file: kernels come and go (an unnamed
        context is never taken again), and their files would pile up in the state directory."""
        self._lock.release(remove=True)

    def __enter__(self) -> ContextLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    is_held = staticmethod(ProcessLock.is_held)


def kernel_attached(state_dir: Path, state: SandboxState) -> bool:
    """Whether a kernel process holds the context of the sandbox with ``state`` right now."""
    owner, context = state.get("owner"), state.get("context")
    if not owner or not context:
        return False
    return ContextLock.is_held(lock_path(state_dir, str(owner), str(context)))


def remove_free_lock_files(state_dir: Path, grace: float) -> list[str]:
    """Remove the lock files no kernel holds, older than ``grace`` seconds; their names.

    A kernel removes its file as it lets its context go (ContextLock.release); one that was
    killed leaves it. Each is taken before it is removed, as a kernel would take it, so a
    kernel taking it at the same moment either wins (and the file stays) or finds it gone and
    takes a new one (ProcessLock.try_acquire)."""
    from jupyter_sandbox.sandbox.host.sandbox_dir import (
        age_of,  # not at import: a kernel's lifeline reads lock paths alone
    )

    removed = []
    for path in sorted((state_dir / "locks").glob("*.lock")):
        age = age_of(path)
        if age < grace or math.isinf(age):  # a kernel may be taking it; or it is gone
            continue
        lock = ProcessLock(path)
        if lock.try_acquire():
            lock.release(remove=True)
            removed.append(path.name)
    return removed
