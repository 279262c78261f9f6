"""Messages the proxy answers itself: for a sandbox that died, or one that never started.

A frontend must always learn what happened in its own terms: a cell that was running gets an
error naming the cause and an execute_reply, and a kernel whose sandbox could not start answers
every request with the error that says how to fix it (visible in JupyterLab, nbclient and agent
code alike) instead of vanishing.
"""

from __future__ import annotations

import sys
from typing import Any

from .relay import Relay
from .wire import WireMessage

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
    signer = relay.frontend_signer
    publish_status(relay, request, "busy")
    if request.msg_type == "execute_request":
        relay.send_to_frontend(
            "iopub",
            signer.new_message(
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
    reply_type = request.msg_type.replace("_request", "_reply")
    relay.send_to_frontend(
        "shell",
        signer.new_message(reply_type, content, parent=request, idents=request.ident_bytes()),
    )
    publish_status(relay, request, "idle")


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
