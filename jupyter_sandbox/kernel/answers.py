"""Messages the proxy answers itself (for a sandbox that died, or one that never started), and
the one it amends: kernel_info_reply, whose banner states the isolation.

A frontend must always learn what happened in its own terms: a cell that was running gets an
error naming the cause and an execute_reply, and a kernel whose sandbox could not start answers
every request with the error that says how to fix it (visible in JupyterLab, nbclient and agent
code alike) instead of vanishing.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from typing import Any

from jupyter_sandbox.kernel.message_relay import Relay
from jupyter_sandbox.kernel.wire import WireMessage
from jupyter_sandbox.sandbox.attestation import banner_line
from jupyter_sandbox.sandbox.host.state_record import SandboxState
from jupyter_sandbox.sandbox.manager import Sandbox
from jupyter_sandbox.sandbox.network import policy_of_state
from jupyter_sandbox.sandbox.settings import RUNTIME_NAMES

LANGUAGE_INFO = {
    "name": "python",
    "version": ".".join(map(str, sys.version_info[:3])),
    "mimetype": "text/x-python",
    "file_extension": ".py",
    "pygments_lexer": "ipython3",
    "codemirror_mode": {"name": "ipython", "version": 3},
    "nbconvert_exporter": "python",
}


def error_content(ename: str, evalue: str) -> dict[str, Any]:
    return {
        "status": "error",
        "ename": ename,
        "evalue": evalue,
        "traceback": [f"{ename}: {evalue}"],
    }


def publish_status(relay: Relay, request: WireMessage, state: str) -> None:
    """iopub status (busy, idle) for ``request``, as a kernel publishes around every request.

    Jupyter Server's websocket waits for an iopub message after its kernel_info "nudge" before
    it tells Lab the kernel is connected: a reply alone leaves Lab "Connecting" for good.
    """
    relay.send_to_frontend(
        "iopub",
        relay.frontend_signer.new_message(
            "status", {"execution_state": state}, parent=request, idents=[b"kernel.sandbox.status"]
        ),
    )


def fail_request(relay: Relay, request: WireMessage, ename: str, evalue: str) -> None:
    """Answer one shell request with an error, as the kernel would have: iopub busy, the error,
    the reply, iopub idle."""
    publish_status(relay, request, "busy")
    if request.msg_type == "execute_request":
        relay.send_to_frontend(
            "iopub",
            relay.frontend_signer.new_message(
                "error",
                error_content(ename, evalue),
                parent=request,
                idents=[b"kernel.sandbox.error"],
            ),
        )
        content = {
            **error_content(ename, evalue),
            "execution_count": None,
            "user_expressions": {},
            "payload": [],
        }
    else:
        content = error_content(ename, evalue)
    reply(relay, "shell", request, content)
    publish_status(relay, request, "idle")


def reply(relay: Relay, channel: str, request: WireMessage, content: dict[str, Any]) -> None:
    """Send ``request``'s reply (``<name>_request`` is answered by ``<name>_reply``) to whoever
    asked, on ``channel``."""
    relay.send_to_frontend(
        channel,
        relay.frontend_signer.new_message(
            request.msg_type.replace("_request", "_reply"),
            content,
            parent=request,
            idents=request.ident_bytes(),
        ),
    )


def serve_unavailable(relay: Relay, reason: str, stop: Callable[[int], None]) -> None:
    """Answer every request of a kernel whose sandbox could not start: kernel_info with the
    reason in its banner, cells with an error naming the reason (and so the fix), shutdown by
    stopping (``stop(0)``); anything else with an empty ok reply."""

    def answer(channel: str, message: WireMessage) -> None:
        if message.msg_type == "kernel_info_request":
            publish_status(relay, message, "busy")
            reply(relay, channel, message, unavailable_kernel_info(reason))
            publish_status(relay, message, "idle")
        elif message.msg_type == "shutdown_request":
            reply(relay, channel, message, {"status": "ok", "restart": False})
            asyncio.get_running_loop().call_soon(stop, 0)  # after the reply is sent
        elif channel == "shell":
            fail_request(relay, message, "SandboxUnavailable", reason)
        else:
            reply(relay, channel, message, {"status": "ok"})

    relay.serve(answer)


def unavailable_kernel_info(message: str) -> dict[str, Any]:
    """kernel_info_reply content of a kernel whose sandbox could not start."""
    return {
        "status": "ok",
        "protocol_version": "5.3",
        "implementation": "jupyter-sandbox",
        "implementation_version": "0",
        "language_info": LANGUAGE_INFO,
        "banner": f"Sandboxed Python is not running: {message}\n",
        "help_links": [],
    }


def with_isolation_banner(
    message: WireMessage, sandbox: Sandbox, state: SandboxState
) -> WireMessage:
    """``message`` (a kernel_info_reply) with the isolation stated above the kernel's banner:
    runtime, network policy, limits, /workspace mode and the attestation's verdict."""
    runtime = RUNTIME_NAMES.get(sandbox.info.runtime, sandbox.info.runtime)
    workspace = sandbox.workspace
    lines = [
        f"Sandboxed Python on {runtime}, sandbox {sandbox.sandbox_id}",
        f"network: {policy_of_state(state).describe()}; {sandbox.limits.describe()}",
        f"/workspace: {workspace.mode}" + (f" ({workspace.note})" if workspace.note else ""),
        banner_line(state),
    ]
    content = message.content_dict()
    content["banner"] = "\n".join(lines) + "\n\n" + str(content.get("banner", ""))
    message.content = json.dumps(content).encode()
    return message
