"""REST handlers of a sandbox's network: ``/api/sandboxes/{id}/network`` and its audit.

``GET`` answers the policy, ``PUT`` replaces it on the running sandbox at once (its kernel keeps
its state: the host proxy reads the policy on every request), ``GET .../network/audit`` answers
the last egress decisions. The policy lives host-side only, so code in the sandbox cannot call
this to widen its own egress (the sandbox has no route to the server).
"""

from __future__ import annotations

from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado import web

from jupyter_sandbox.protocol.errors import InvalidRequestError
from jupyter_sandbox.protocol.requests import json_object
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.network import NetworkPolicy, proxy_running
from jupyter_sandbox.server_extension.base import SANDBOX_ID, SandboxAPIHandler

MAX_AUDIT_ENTRIES = 10000


class SandboxNetworkHandler(SandboxAPIHandler):
    """``/api/sandboxes/{id}/network``: the egress policy, read and replaced."""

    def policy_model(self, sandbox_id: str, policy: NetworkPolicy) -> dict[str, Any]:
        directory = SandboxDirectory(self.manager.settings.state_path, sandbox_id)
        return {**policy.as_dict(), "proxy_running": proxy_running(directory)}

    @web.authenticated
    @authorized
    async def get(self, sandbox_id: str) -> None:
        policy = await self.manager.network_policy(self.owner, sandbox_id)
        self.write_json(self.policy_model(sandbox_id, policy))

    @web.authenticated
    @authorized
    async def put(self, sandbox_id: str) -> None:
        policy = NetworkPolicy.from_dict(json_object(self.request.body))
        policy = await self.manager.set_network_policy(self.owner, sandbox_id, policy)
        self.write_json(self.policy_model(sandbox_id, policy))


class SandboxNetworkAuditHandler(SandboxAPIHandler):
    """``/api/sandboxes/{id}/network/audit?limit=N``: the last egress decisions, oldest first."""

    @web.authenticated
    @authorized
    async def get(self, sandbox_id: str) -> None:
        text = self.get_argument("limit", "1000")
        if not text.isdigit() or not 0 < int(text) <= MAX_AUDIT_ENTRIES:
            raise InvalidRequestError(
                f"limit must be a whole number from 1 to {MAX_AUDIT_ENTRIES}, not {text!r}"
            )
        entries = await self.manager.network_audit(self.owner, sandbox_id, int(text))
        self.write_json({"entries": entries})


network_handlers = [
    (rf"/api/sandboxes/{SANDBOX_ID}/network/?", SandboxNetworkHandler),
    (rf"/api/sandboxes/{SANDBOX_ID}/network/audit/?", SandboxNetworkAuditHandler),
]
