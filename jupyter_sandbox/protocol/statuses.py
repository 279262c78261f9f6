"""The status words a sandbox and a code run are known by, on the wire and in the core.

Each is a closed set: what the engine or a kernel reports is narrowed to it on arrival (both are
outside the host's trust), so that code comparing a status compares against a word that exists.
"""

from __future__ import annotations

from typing import Literal, get_args

# A sandbox as its engine describes it (Docker's container states); "unknown" when the engine
# named none or a state this package does not know.
SandboxStatus = Literal[
    "created", "running", "paused", "restarting", "removing", "exited", "dead", "unknown"
]

# How a code run ended, as the kernel's execute_reply says: "error" when the code raised (or the
# reply was missing or unreadable), "aborted" when the kernel skipped it.
RunStatus = Literal["ok", "error", "aborted"]


def sandbox_status(reported: object) -> SandboxStatus:
    """The engine's word for a sandbox's state, or "unknown" for anything else."""
    for status in get_args(SandboxStatus):
        if reported == status:
            return status  # type: ignore[no-any-return]
    return "unknown"


def run_status(reported: object) -> RunStatus:
    """The kernel's word for how a run ended; anything else counts as "error"."""
    for status in get_args(RunStatus):
        if reported == status:
            return status  # type: ignore[no-any-return]
    return "error"
