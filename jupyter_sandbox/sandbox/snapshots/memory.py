"""Memory snapshots: checkpoint a sandbox's live kernel under gVisor, and restore it.

A memory snapshot keeps the interpreter itself: variables, imported modules, open files,
threads, everything in the sandbox's memory. It is the engine's checkpoint of the container
(``docker checkpoint create``, gVisor's ``runsc checkpoint``), kept by the engine with the
container, and restored into that same container (``docker start --checkpoint``): Docker 20.10
cannot restore into another. What survives and what does not is in docs/snapshots.md.

It is only attempted where it is known to work, because under runsc a checkpoint that fails can
stop the sandbox and lose its state. :func:`check_checkpointable` refuses, before anything is
touched, a sandbox that is not runsc, was not made behind the kernel bridge
(``SandboxSettings.memory_snapshots``: gVisor cannot save host Unix sockets, so its kernel
listens on TCP inside and the bridge owns the host-facing sockets), has ever had network egress
(its forwarder holds a host socket), has a kernel attached (that kernel's sockets would break),
an engine without experimental mode, or a runsc older than 20240729 (which cannot save a
listening TCP socket either).

Checkpoint: the bridge closes every host socket, the engine saves the container (which then
exits, unless ``leave_running``), and the state file records the snapshot and, for a stopped
sandbox, ``checkpointed``: the reaper and the idle culler leave such a sandbox alone, and the
next kernel started with its context resumes it (SandboxManager.find_context). Restore: a
running sandbox is stopped first, the engine restores the checkpoint, and the bridge binds a new
generation of sockets (as a kernel restart does), so whoever attaches next finds the kernel.

The metadata lives in the sandbox's state file, not in the snapshot store: the checkpoint goes
with its container, and so does the record of it.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_sandbox.protocol.errors import SandboxConflictError, SandboxError
from jupyter_sandbox.protocol.snapshot_errors import (
    MemorySnapshotRefusedError,
    MemorySnapshotUnsupportedError,
    SnapshotFailedError,
    SnapshotNotFoundError,
)
from jupyter_sandbox.sandbox.backends.records import EngineFacts, SandboxInfo
from jupyter_sandbox.sandbox.host.clock import now_iso
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory, sandbox_directories
from jupyter_sandbox.sandbox.host.state_record import SandboxState
from jupyter_sandbox.sandbox.lifecycle.contexts import kernel_attached
from jupyter_sandbox.sandbox.sandbox_types import Sandbox
from jupyter_sandbox.sandbox.snapshots.kernel_bridge import close_bridge, open_bridge
from jupyter_sandbox.sandbox.snapshots.storage import check_snapshot_id, new_snapshot_id

if TYPE_CHECKING:
    from jupyter_sandbox.sandbox.sandbox_access import SandboxLifecycle

log = logging.getLogger(__name__)

# gVisor releases before this one cannot save a listening TCP socket ("endpoint still has
# waiters upon save"); measured with 20221219 and 20240729.
MIN_RUNSC_RELEASE = 20240729
WORKSPACE_HINT = (
    "Workspace snapshots (kind 'workspace') work everywhere: they keep the files in /workspace, "
    "not the interpreter's variables, imported modules or running processes."
)


def check_checkpointable(
    info: SandboxInfo,
    state: SandboxState,
    facts: EngineFacts,
    *,
    attached: bool,
    runsc_release: int | None,
) -> None:
    """Raise why the sandbox cannot be checkpointed now (nothing is touched); None: it can."""
    sandbox = f"memory snapshot of sandbox {info.sandbox_id} refused"

    def unsupported(why: str) -> MemorySnapshotUnsupportedError:
        return MemorySnapshotUnsupportedError(f"{sandbox}: {why}. {WORKSPACE_HINT}")

    def refused(why: str) -> MemorySnapshotRefusedError:
        return MemorySnapshotRefusedError(f"{sandbox}: {why}. {WORKSPACE_HINT}")

    # What the sandbox is (its runtime, how it was made, its network) is the caller's choice: 409.
    if info.runtime != "runsc":
        raise refused(
            f"the {info.runtime} runtime cannot checkpoint a kernel here (Docker's checkpoint "
            "under runc relies on CRIU, which cannot dump a running ipykernel); use runsc"
        )
    if not state.get("bridged"):
        raise refused(
            "it was not made for memory snapshots: set c.SandboxSettings.memory_snapshots = "
            "True and create a new sandbox (its kernel then listens behind a bridge that can "
            "let go of its host sockets)"
        )
    if "network_token" in state:
        raise refused(
            "it has had network egress, whose forwarder holds a host socket that gVisor cannot "
            "save; memory snapshots need a sandbox whose network policy was always 'none'"
        )
    # What the server's engine lacks is not the caller's to change: 501.
    if not facts.experimental:
        raise unsupported(
            "the Docker daemon's experimental mode is off, and Docker's checkpoints need it: "
            'set "experimental": true in /etc/docker/daemon.json and restart dockerd '
            "(scripts/engine-bootstrap.sh does both)"
        )
    if runsc_release is not None and runsc_release < MIN_RUNSC_RELEASE:
        raise unsupported(
            f"gVisor {runsc_release} cannot save a kernel's sockets (it needs {MIN_RUNSC_RELEASE} "
            "or later; on Debian 12: apt-get install -t bookworm-backports runsc)"
        )
    if state.get("checkpointed"):
        raise SandboxConflictError(
            f"{sandbox}: it is stopped at memory snapshot {state['checkpointed']}; restore it "
            "first (POST /api/snapshots/<id>/restore)"
        )
    if not info.running:
        raise SandboxConflictError(f"{sandbox}: {info.death_cause()}")
    if attached:
        raise SandboxConflictError(
            f"{sandbox}: a kernel is attached to its context {state.get('context')!r}; shut "
            "that kernel down first (the context keeps the interpreter alive) and retry"
        )


class MemorySnapshots:
    """Checkpoints of ``manager``'s sandboxes; reached through ``manager.snapshots``."""

    def __init__(self, manager: SandboxLifecycle) -> None:
        self.manager = manager

    async def checkpoint(
        self, owner: str, sandbox_id: str, *, leave_running: bool = False, note: str = ""
    ) -> dict[str, Any]:
        """Save ``owner``'s sandbox, kernel and all; returns the snapshot's metadata.

        The sandbox stops (its memory is freed) unless ``leave_running``.
        """
        manager = self.manager
        info = await manager.get(owner, sandbox_id)
        directory = self._directory(sandbox_id)
        state = directory.read_state()
        facts = await manager.backend.engine_facts()
        check_checkpointable(
            info,
            state,
            facts,
            attached=kernel_attached(manager.settings.state_path, state),
            runsc_release=local_runsc_release(),
        )
        snapshot_id = new_snapshot_id()
        await close_bridge(directory)
        # Recorded first: from the moment the sandbox exits, the reaper must leave it alone.
        directory.update_state(checkpointed=None if leave_running else snapshot_id)
        started = time.monotonic()
        try:
            await manager.backend.checkpoint(sandbox_id, snapshot_id, leave_running=leave_running)
        except SandboxError as exc:
            await self._recover(owner, sandbox_id, directory, exc)
        seconds = time.monotonic() - started
        metadata = {
            "id": snapshot_id,
            "owner": owner,
            "kind": "memory",
            "created": now_iso("auto"),
            "source": {"sandbox": sandbox_id, "image": info.image, "runtime": info.runtime},
            "size": checkpoint_bytes(facts, info, snapshot_id),
            "sha256": None,
            "members": None,
            "checkpoint_seconds": round(seconds, 3),
            "left_running": leave_running,
            "note": note[:200],
        }
        directory.modify_state(lambda state: _with_snapshots(state, {snapshot_id: metadata}))
        log.info("memory snapshot %s of sandbox %s took %.2f s", snapshot_id, sandbox_id, seconds)
        if leave_running:
            await self._reattach(owner, sandbox_id, directory)
        return metadata

    async def restore(self, owner: str, snapshot_id: str) -> Sandbox:
        """Bring the snapshot's sandbox back to the moment of the snapshot; returns it once its
        kernel answers. A running sandbox is stopped first (it must have no kernel attached)."""
        sandbox_id, _ = self.find(owner, snapshot_id)
        manager = self.manager
        info = await manager.get(owner, sandbox_id)
        directory = self._directory(sandbox_id)
        state = directory.read_state()
        if info.running:
            if kernel_attached(manager.settings.state_path, state):
                raise SandboxConflictError(
                    f"cannot restore memory snapshot {snapshot_id}: a kernel is attached to "
                    f"sandbox {sandbox_id} (context {state.get('context')!r}); shut it down first"
                )
            directory.update_state(checkpointed=snapshot_id)  # stopped, not dead: keep it
            await manager.backend.stop(sandbox_id, timeout=0)
        started = time.monotonic()
        try:
            await manager.backend.start_from_checkpoint(sandbox_id, snapshot_id)
        except SandboxError as exc:
            directory.update_state(checkpointed=snapshot_id)
            raise SnapshotFailedError(
                f"restoring memory snapshot {snapshot_id} into sandbox {sandbox_id} failed "
                f"({exc.message}); the sandbox stays stopped: retry, or remove the sandbox"
            ) from None
        log.info(
            "sandbox %s restored from memory snapshot %s in %.2f s",
            sandbox_id,
            snapshot_id,
            time.monotonic() - started,
        )
        directory.update_state(checkpointed=None, last_activity=now_iso())
        return await self._reattach(owner, sandbox_id, directory)

    def list_for(self, owner: str) -> list[dict[str, Any]]:
        """``owner``'s memory snapshots, from the state of each of their sandboxes."""
        found: list[dict[str, Any]] = []
        for directory in sandbox_directories(self.manager.settings.state_path):
            state = directory.read_state()
            if state.get("owner") == owner:
                found.extend((state.get("memory_snapshots") or {}).values())
        return found

    def find(self, owner: str, snapshot_id: str) -> tuple[str, dict[str, Any]]:
        """(sandbox id, metadata) of ``owner``'s memory snapshot; SnapshotNotFoundError."""
        check_snapshot_id(snapshot_id)
        for directory in sandbox_directories(self.manager.settings.state_path):
            state = directory.read_state()
            snapshots = state.get("memory_snapshots") or {}
            if state.get("owner") == owner and snapshot_id in snapshots:
                return directory.sandbox_id, snapshots[snapshot_id]
        raise SnapshotNotFoundError(f"no snapshot {snapshot_id}")

    async def delete(self, owner: str, snapshot_id: str) -> None:
        sandbox_id, _ = self.find(owner, snapshot_id)
        directory = self._directory(sandbox_id)
        if directory.read_state().get("checkpointed") == snapshot_id:
            raise SandboxConflictError(
                f"sandbox {sandbox_id} is stopped at memory snapshot {snapshot_id}: restore it "
                "first, or remove the sandbox (which removes its snapshots)"
            )
        await self.manager.backend.remove_checkpoint(sandbox_id, snapshot_id)
        directory.modify_state(lambda state: _with_snapshots(state, {}, drop=snapshot_id))

    # -- helpers ------------------------------------------------------------------------------

    async def _reattach(self, owner: str, sandbox_id: str, directory: SandboxDirectory) -> Sandbox:
        """New host sockets for the kernel (a new generation, as a restart makes), then the
        usual wait for its answer."""
        await open_bridge(directory, directory.next_generation())
        return await self.manager.attach(owner, sandbox_id)

    async def _recover(
        self, owner: str, sandbox_id: str, directory: SandboxDirectory, error: SandboxError
    ) -> None:
        """After a failed checkpoint: reopen a sandbox that runs on; report one that stopped."""
        directory.update_state(checkpointed=None)
        info = await self.manager.backend.inspect(sandbox_id)
        if info.running:
            await self._reattach(owner, sandbox_id, directory)
            raise SnapshotFailedError(
                f"the memory snapshot of sandbox {sandbox_id} failed ({error.message}); the "
                "sandbox runs on with its kernel as it was"
            ) from None
        raise SnapshotFailedError(
            f"the memory snapshot of sandbox {sandbox_id} failed ({error.message}) and the "
            "runtime stopped the sandbox: its kernel's state is lost; remove it"
        ) from None

    def _directory(self, sandbox_id: str) -> SandboxDirectory:
        return SandboxDirectory(self.manager.settings.state_path, sandbox_id)


def checkpoint_bytes(facts: EngineFacts, info: SandboxInfo, name: str) -> int | None:
    """The size of the engine's checkpoint image, when its directory is readable from here."""
    root = Path(facts.root_dir) / "containers" / info.container_id / "checkpoints" / name
    if not facts.root_dir or not root.is_dir():
        return None
    try:
        return sum(
            os.lstat(os.path.join(top, f)).st_size for top, _, files in os.walk(root) for f in files
        )
    except OSError:
        return None


def local_runsc_release() -> int | None:
    """The release of the runsc on this host (the engine's, when the engine is local)."""
    from jupyter_sandbox.sandbox.doctor import command_version, runsc_release

    return runsc_release(command_version(["runsc", "--version"]))


def _with_snapshots(
    state: SandboxState, added: dict[str, Any], *, drop: str | None = None
) -> SandboxState:
    """``state`` with its memory snapshots' metadata changed (run under the state's lock, so
    two checkpoints of one sandbox, or a checkpoint and a delete, never lose each other's)."""
    kept = {**(state.get("memory_snapshots") or {}), **added}
    kept.pop(drop or "", None)
    return {**state, "memory_snapshots": kept}
