"""``jupyter sandbox snapshot create|list|restore|delete``: workspace snapshots.

Each verb is an OwnerCommand (cli/owner.py) reading ``jupyter_sandbox_config.py``
(``c.Snapshots.snapshot_dir`` and the caps) and acting as the owner ``--owner`` names. The
``snapshot`` group that holds them is cli/main.py's SnapshotApp, beside the ``jupyter sandbox`` group.
"""

from __future__ import annotations

import os
from typing import Any

from traitlets import Bool, Enum, Unicode

from jupyter_sandbox.cli.owner import OwnerCommand
from jupyter_sandbox.cli.text import print_table, shown
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.settings import SandboxSettings
from jupyter_sandbox.sandbox.snapshots.service import Snapshots
from jupyter_sandbox.sandbox.use_cases import NewSandbox, create_sandbox


class _SnapshotCommand(OwnerCommand):
    classes = [SandboxSettings, Snapshots]
    group = "snapshot"


class CreateApp(_SnapshotCommand):
    description = (
        "Store a snapshot of a sandbox's /workspace, or with --kind=memory checkpoint its live "
        "kernel (runsc; the sandbox stops unless --leave-running); prints its id."
    )
    usage = "create SANDBOX_ID [--note=TEXT] [--kind=workspace|memory] [--leave-running]"
    note = Unicode("", config=True, help="A note stored with the snapshot (at most 200 chars).")
    kind = Enum(["workspace", "memory"], "workspace", config=True, help="What to snapshot.")
    leave_running = Bool(
        False, config=True, help="A memory snapshot leaves the sandbox running (default: stops)."
    )
    aliases = {"note": "CreateApp.note", "kind": "CreateApp.kind"}
    flags = {
        "leave-running": ({"CreateApp": {"leave_running": True}}, leave_running.help),
    }

    async def run(self, manager: SandboxManager, owner: str, sandbox_id: str) -> int:
        made = await manager.snapshots.persist(
            owner, sandbox_id, note=self.note, kind=self.kind, leave_running=self.leave_running
        )
        print(made["id"])
        return 0


class ListApp(_SnapshotCommand):
    description = "List your snapshots."
    usage = "list"

    async def run(self, manager: SandboxManager, owner: str) -> int:
        print_table(COLUMNS, map(_row, manager.snapshots.list_snapshots(owner)))
        return 0


COLUMNS = [
    ("SNAPSHOT", "16"),
    ("CREATED", "32"),
    ("BYTES", ">12"),
    ("SOURCE", "12"),
    ("KIND", ""),
    ("NOTE", ""),
]


def _row(item: dict[str, Any]) -> tuple[object, ...]:
    """A snapshot's row in ``list``; its note is the caller's text: escaped."""
    source = item.get("source", {}).get("sandbox") or "(imported)"
    size = "?" if item.get("size") is None else item["size"]
    return (
        item["id"],
        item["created"],
        size,
        source,
        item.get("kind", "workspace"),
        shown(item.get("note", "")),
    )


class RestoreApp(_SnapshotCommand):
    description = (
        "Restore a snapshot into a running sandbox (--sandbox) or into a new one, or a memory "
        "snapshot into its own sandbox; prints the sandbox's id."
    )
    usage = "restore SNAPSHOT_ID [--sandbox=SANDBOX_ID] [--runtime=runsc|runc]"
    sandbox = Unicode(
        "", config=True, help="Restore into this running sandbox (default: a new one)."
    )
    runtime = Unicode("", config=True, help="Runtime of the new sandbox (default: the setting).")
    aliases = {
        "sandbox": "RestoreApp.sandbox",
        "runtime": "RestoreApp.runtime",
    }

    async def run(self, manager: SandboxManager, owner: str, snapshot_id: str) -> int:
        if manager.snapshots.get(owner, snapshot_id)["kind"] == "memory":
            print((await manager.snapshots.restore_memory(owner, snapshot_id)).sandbox_id)
            return 0
        if self.sandbox:
            await manager.snapshots.hydrate(owner, snapshot_id, self.sandbox)
            print(self.sandbox)
            return 0
        request = NewSandbox(
            runtime=self.runtime or None,
            snapshot=snapshot_id,
            # The note on the container, as the kernel takes it (the tests name themselves).
            purpose=os.environ.get("JUPYTER_SANDBOX_PURPOSE", "cli-restore"),
        )
        made = await create_sandbox(manager, owner, request)
        print(made.sandbox_id)
        return 0


class DeleteApp(_SnapshotCommand):
    description = "Delete a snapshot."
    usage = "delete SNAPSHOT_ID"

    async def run(self, manager: SandboxManager, owner: str, snapshot_id: str) -> int:
        await manager.snapshots.delete(owner, snapshot_id)
        return 0
