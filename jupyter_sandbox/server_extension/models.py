"""The JSON the REST API answers with for one sandbox (schema ``Sandbox`` in openapi.yaml).

Built from the engine's view (existence, status, runtime, image: the truth), the sandbox's
state file (context, kernel attached, activity, metadata) and the culler (when it will go).
Nothing secret leaves: no keys, no host paths.
"""

from __future__ import annotations

from typing import Any

from jupyter_sandbox.sandbox.backends.records import SandboxInfo
from jupyter_sandbox.sandbox.host.state_record import SandboxState
from jupyter_sandbox.sandbox.lifecycle.contexts import kernel_attached
from jupyter_sandbox.sandbox.lifecycle.culler import SandboxCuller
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.network import policy_of_state


def sandbox_model(
    manager: SandboxManager,
    culler: SandboxCuller,
    info: SandboxInfo,
    state: SandboxState | None = None,
) -> dict[str, Any]:
    """``state`` is the sandbox's state file when the caller has read it already."""
    if state is None:
        state = manager.read_state(info.sandbox_id)
    deadline = culler.deadline(state)
    attached = kernel_attached(manager.settings.state_path, state)
    return {
        "id": info.sandbox_id,
        "owner": info.owner,
        "status": info.status,
        "runtime": info.runtime,
        "image": info.image,
        "created": state.get("created") or info.created,
        "last_activity": state.get("last_activity"),
        "busy": bool(state.get("busy")) and attached,
        "expires": None if deadline is None else deadline.isoformat(timespec="seconds"),
        "metadata": state.get("metadata") or {},
        "context": None if state.get("ephemeral") else state.get("context"),
        "ephemeral": bool(state.get("ephemeral")),
        "limits": state.get("limits") or {},
        "workspace": state.get("workspace") or {"mode": "none", "note": ""},
        "network": {"policy": policy_of_state(state).mode},
        "kernel": {
            "attached": attached,
            "id": state.get("kernel_id") if attached else None,
            "notebook": (state.get("notebook") or None) if attached else None,
            "since": state.get("attached") if attached else None,
        },
        "exit": None if info.alive else info.death_cause(),
    }
