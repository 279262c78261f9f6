"""Memory snapshots (checkpoint and restore of a live kernel): refused up front, with why.

A memory snapshot would keep the interpreter itself (variables, imported modules, open files).
On this project's machines it cannot be done safely, as measured and recorded in DESIGN.md
"Snapshots":

* runsc 20221219 refuses to checkpoint a live ipykernel: its ``ipc://`` sockets are bound host
  sockets ("endpoint with bound host socket"); with TCP inside the sandbox instead, "endpoint
  still has waiters upon save". runsc 20240729 (bookworm-backports) stops at the same bound
  host socket (``lisafs.ClientBoundSocketFD``).
* A failed ``docker checkpoint create`` under runsc **stopped the container**: its whole state
  was lost. So no attempt is ever made on a live kernel "to see if it works".
* Under runc, Docker's checkpoint uses CRIU, whose dump of a live ipykernel fails as well, and
  both need the Docker daemon's experimental mode, which this project never turns on.

So every request is answered at once, before the sandbox is touched, with
:class:`MemorySnapshotUnsupportedError` (stable code ``memory_snapshot_unsupported``).
Workspace snapshots keep working. What a memory snapshot would need (docs/snapshots.md, with
measurements): a kernel whose host-facing sockets belong to a small bridge inside the sandbox
that closes and reopens them around the checkpoint. runsc 20240729 does checkpoint TCP sockets
inside the sandbox, and Docker's experimental checkpoint restores the same container under runsc.
"""

from __future__ import annotations

from .errors import MemorySnapshotUnsupportedError

WORKSPACE_HINT = (
    "Workspace snapshots (kind 'workspace') work: they keep the files in /workspace, not the "
    "interpreter's variables, imported modules or running processes."
)


def memory_snapshot_refusal(sandbox_id: str, runtime: str) -> MemorySnapshotUnsupportedError:
    """The error that answers a memory snapshot request for a sandbox under ``runtime``."""
    if runtime == "runsc":
        why = (
            "gVisor (runsc) on this host cannot checkpoint a live kernel: the kernel's ipc:// "
            "sockets are bound host sockets, which runsc's checkpoint refuses, and a failed "
            "checkpoint under runsc stops the container and loses its state. So none is "
            "attempted"
        )
    else:
        why = (
            f"the {runtime} runtime cannot checkpoint a live kernel here: Docker's checkpoint "
            "under runc relies on CRIU, which cannot dump a running ipykernel, and needs the "
            "Docker daemon's experimental mode, which this project does not enable"
        )
    return MemorySnapshotUnsupportedError(
        f"memory snapshot of sandbox {sandbox_id} refused: {why}; the sandbox is untouched. "
        + WORKSPACE_HINT
    )
