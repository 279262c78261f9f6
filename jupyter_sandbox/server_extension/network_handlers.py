"""REST handlers of a sandbox's network: ``/api/sandboxes/{id}/network`` and its audit.

``GET`` answers the policy, ``PUT`` replaces it on the running sandbox at once (its kernel keeps
its state: the host proxy reads the policy on every request), ``GET .../network/audit`` answers
the last egress decisions. The policy lives host-side only, so code in the sandbox cannot call
this to widen its own egress (the sandbox has no route to the server).

Under an ``ask`` policy, ``GET .../network/requests`` lists the requests the sandbox's proxy
holds for the owner (``?follow=true``: as Server-Sent Events, again at each change) and
``POST .../network/requests/{request_id}`` decides one (network/asks.py). The route takes any
segment as the id, so an unknown or malformed one is the API's own 404
(``network_request_not_found``), found after the owner's sandbox is.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado import web

from jupyter_sandbox.protocol.errors import InvalidRequestError, SandboxNotFoundError
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.host.state_record import SandboxState
from jupyter_sandbox.sandbox.lifecycle.contexts import kernel_attached
from jupyter_sandbox.sandbox.network import NetworkPolicy, proxy_running
from jupyter_sandbox.sandbox.network.asks import DECISIONS, decide, follow_pending, pending_requests
from jupyter_sandbox.server_extension.base import SANDBOX_ID, JsonBodyHandler, SandboxAPIHandler
from jupyter_sandbox.server_extension.event_stream import Event, EventStreamHandler

MAX_AUDIT_ENTRIES = 10000
_REQUEST_ID = r"(?P<request_id>[^/]+)"
# ?follow=: yes and no as a query string says them (Python's requests sends True), nothing else.
_FOLLOW = {"true": True, "1": True, "false": False, "0": False}


class SandboxNetworkHandler(JsonBodyHandler):
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
        policy = NetworkPolicy.from_dict(await self.json_body())
        policy = await self.manager.set_network_policy(self.owner, sandbox_id, policy)
        self.write_json(self.policy_model(sandbox_id, policy))


class SandboxNetworkAuditHandler(SandboxAPIHandler):
    """``/api/sandboxes/{id}/network/audit?limit=N``: the last egress decisions, oldest first."""

    @web.authenticated
    @authorized
    async def get(self, sandbox_id: str) -> None:
        text = self.query_argument("limit", "1000") or ""
        if (
            not (text.isascii() and text.isdigit() and len(text) <= 9)
            or not 0 < int(text) <= MAX_AUDIT_ENTRIES
        ):
            raise InvalidRequestError(
                f"limit must be a whole number from 1 to {MAX_AUDIT_ENTRIES}, not {text!r}"
            )
        entries = await self.manager.network_audit(self.owner, sandbox_id, int(text))
        self.write_json({"entries": entries})


class HeldRequestsBase(EventStreamHandler):
    """What both routes of held requests share: the models of a sandbox's requests."""

    def directory(self, sandbox_id: str) -> SandboxDirectory:
        return SandboxDirectory(self.manager.settings.state_path, sandbox_id)

    def requests_of(self, sandbox_id: str) -> list[dict[str, Any]]:
        """The sandbox's held requests (none when its proxy does not run), each with the
        sandbox and the kernel (and notebook) attached to it, if any."""
        directory = self.directory(sandbox_id)
        if not proxy_running(directory):
            return []
        pending = pending_requests(directory.root)
        if not pending:
            return []
        kernel = self.kernel_of(directory.read_state())
        return [request_model(sandbox_id, request, kernel) for request in pending]

    def kernel_of(self, state: SandboxState) -> dict[str, Any] | None:
        """The kernel attached to the sandbox, and its notebook: whose code asked."""
        if not kernel_attached(self.manager.settings.state_path, state):
            return None
        return {"id": state.get("kernel_id"), "notebook": state.get("notebook") or None}


def request_model(
    sandbox_id: str, request: dict[str, Any], kernel: dict[str, Any] | None
) -> dict[str, Any]:
    """Schema ``HeldRequest``: what the proxy recorded, named fields only."""
    return {
        "request_id": str(request.get("request_id")),
        "sandbox": sandbox_id,
        "host": str(request.get("host")),
        "port": int(request.get("port") or 0),
        "method": str(request.get("method")),
        "asked_at": str(request.get("asked_at")),
        "expires_at": str(request.get("expires_at")),
        "kernel": kernel,
    }


class SandboxNetworkRequestsHandler(HeldRequestsBase):
    """``/api/sandboxes/{id}/network/requests[?follow=true]``: the requests held for a
    decision, oldest first; followed, an event ``requests`` with all of them at once and at
    each change, ``ping`` after 15 s without one."""

    @web.authenticated
    @authorized
    async def get(self, sandbox_id: str) -> None:
        value = self.query_argument("follow", "false") or ""
        if value.lower() not in _FOLLOW:
            raise InvalidRequestError(
                f"the query argument follow must be true or false (1 or 0), not {value!r:.40}: "
                "true streams the held requests at once and at each change"
            )
        await self.manager.get(self.owner, sandbox_id)
        if not _FOLLOW[value.lower()]:
            self.write_json({"requests": self.requests_of(sandbox_id)})
            return
        await self.send_events(self.follow(sandbox_id), f"following the requests of {sandbox_id}")

    async def follow(self, sandbox_id: str) -> AsyncGenerator[Event, None]:
        directory = self.directory(sandbox_id)

        def current() -> list[dict[str, Any]]:
            if not directory.root.is_dir():
                raise SandboxNotFoundError(f"sandbox {sandbox_id} was removed")
            return self.requests_of(sandbox_id)

        events = follow_pending(current)
        try:
            async for event in events:
                yield event
        except SandboxNotFoundError as exc:
            yield "error", exc.to_dict()
        finally:
            await events.aclose()


class SandboxNetworkRequestHandler(JsonBodyHandler, HeldRequestsBase):
    """``POST /api/sandboxes/{id}/network/requests/{request_id}`` with ``{"decision": "once" |
    "sandbox" | "deny"}``: decides a held request, as the user who asks."""

    @web.authenticated
    @authorized
    async def post(self, sandbox_id: str, request_id: str) -> None:
        body = await self.json_body()
        unknown = sorted(set(body) - {"decision"})
        if unknown:
            raise InvalidRequestError(
                f"unknown field(s) {', '.join(map(repr, unknown))}; the body is "
                '{"decision": "once" | "sandbox" | "deny"}'
            )
        decision = body.get("decision")
        if decision not in DECISIONS:
            raise InvalidRequestError(
                f"decision must be one of {', '.join(DECISIONS)}, not {decision!r:.40}"
            )
        await self.manager.get(self.owner, sandbox_id)
        directory = self.directory(sandbox_id)
        decided = decide(directory, request_id, str(decision), self.owner)
        model = request_model(sandbox_id, decided, self.kernel_of(directory.read_state()))
        self.write_json(
            {**model, **{key: decided[key] for key in ("decision", "by", "decided_at")}}
        )


network_handlers = [
    (rf"/api/sandboxes/{SANDBOX_ID}/network/?", SandboxNetworkHandler),
    (rf"/api/sandboxes/{SANDBOX_ID}/network/audit/?", SandboxNetworkAuditHandler),
    (rf"/api/sandboxes/{SANDBOX_ID}/network/requests/?", SandboxNetworkRequestsHandler),
    (
        rf"/api/sandboxes/{SANDBOX_ID}/network/requests/{_REQUEST_ID}/?",
        SandboxNetworkRequestHandler,
    ),
]
