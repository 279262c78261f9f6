"""A sandbox's egress policy: ``/api/sandboxes/{id}/network`` and its audit. The policy lives
on the host (code in the sandbox cannot widen its own), and a new one applies to the next
request the sandbox makes, without restarting it or its interpreter.

Agent code reaches it as ``sandbox.network`` (:class:`~jupyter_sandbox.client.Sandbox` makes
one); ``SandboxClient.create(network=...)`` sets the first policy. Under the mode ``ask``, the
requests the sandbox's proxy holds for the owner are listed (:meth:`SandboxNetwork.requests`),
followed as they come (:meth:`SandboxNetwork.follow_requests`) and decided
(:meth:`SandboxNetwork.decide`)::

    for held in sandbox.network.follow_requests():
        for request in held:
            allowed = request["host"].endswith(".pythonhosted.org")
            sandbox.network.decide(request["request_id"], "sandbox" if allowed else "deny")
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from jupyter_sandbox.client.errors import error_from_answer
from jupyter_sandbox.client.transport import Transport

# What ``network=`` takes: a policy {"mode", "allow", "deny"}, or only its mode.
NetworkSpec = Mapping[str, Any] | str


def network_policy(spec: NetworkSpec) -> dict[str, Any]:
    """The policy object the API takes for ``spec``: "none", "open", "ask" or "allowlist" alone
    (an empty allowlist denies everything) stands for ``{"mode": spec}``."""
    return {"mode": spec} if isinstance(spec, str) else dict(spec)


class SandboxNetwork:
    """The egress policy of one sandbox (``sandbox.network``).

    Modes: ``none`` (no network), ``allowlist`` (only hosts matching ``allow``: ``pypi.org``,
    ``*.example.com``, optionally ``:port``), ``ask`` (an allowlist whose other hosts are held
    until the owner decides: :meth:`requests`, :meth:`decide`), ``open`` (any public address).
    ``deny`` patterns win in every mode, and the host proxy refuses private, loopback and
    metadata addresses whatever a name resolves to."""

    def __init__(self, transport: Transport, sandbox_id: str) -> None:
        self._transport = transport
        self.sandbox_id = sandbox_id

    def __repr__(self) -> str:
        return f"SandboxNetwork({self.sandbox_id!r})"

    def get(self) -> dict[str, Any]:
        """The policy now: ``mode``, ``allow``, ``deny``, and ``proxy_running`` (whether the
        sandbox's host proxy runs)."""
        answer: dict[str, Any] = self._transport.call(
            "GET", "sandboxes", self.sandbox_id, "network"
        )
        return answer

    def set(
        self,
        mode: str,
        allow: Sequence[str] | None = None,
        deny: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """Replace the policy, at once; the policy now in force (as :meth:`get` shows it).
        Going from ``none`` to another mode starts the sandbox's proxy first."""
        policy: dict[str, Any] = {"mode": mode}
        if allow is not None:
            policy["allow"] = list(allow)
        if deny is not None:
            policy["deny"] = list(deny)
        answer: dict[str, Any] = self._transport.call(
            "PUT", "sandboxes", self.sandbox_id, "network", body=policy
        )
        return answer

    def audit(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The last ``limit`` egress decisions (1 to 10000; the server's default 1000), oldest
        first: ``time``, ``host``, ``port``, ``method``, ``allowed``, ``rule``..."""
        query = [] if limit is None else [("limit", str(limit))]
        answer = self._transport.call(
            "GET", "sandboxes", self.sandbox_id, "network", "audit", query=query
        )
        entries: list[dict[str, Any]] = answer["entries"]
        return entries

    def requests(self) -> list[dict[str, Any]]:
        """The requests held for a decision under the mode ``ask``, oldest first: each with
        ``request_id``, ``host``, ``port``, ``method``, ``asked_at``, ``expires_at`` (denied
        then unless decided) and ``kernel`` (``id`` and ``notebook`` of the kernel attached to
        the sandbox, or None)."""
        answer = self._transport.call("GET", "sandboxes", self.sandbox_id, "network", "requests")
        requests: list[dict[str, Any]] = answer["requests"]
        return requests

    def follow_requests(self) -> Iterator[list[dict[str, Any]]]:
        """The held requests (as :meth:`requests` lists them) at once, then each time they
        change, until the caller stops (``break``: that closes the stream); an empty list when
        none waits. The server sends a ping every 15 s in a quiet time, so a wait for the next
        request never times out; SandboxNotFoundError ends it if the sandbox is removed."""
        events = self._transport.events(
            "sandboxes", self.sandbox_id, "network", "requests", query=[("follow", "true")]
        )
        with contextlib.closing(events):
            for event in events:
                if event.name == "requests":
                    yield list(event.data["requests"])
                elif event.name == "error":
                    raise error_from_answer(None, event.data, "following held requests")

    def decide(self, request_id: str, decision: str) -> dict[str, Any]:
        """Decide a held request: ``once`` (this request only), ``sandbox`` (its host:port is
        added to the policy's allow patterns) or ``deny``; the request with ``decision``,
        ``by`` and ``decided_at``. NetworkRequestNotFoundError when it no longer waits
        (decided, timed out)."""
        answer: dict[str, Any] = self._transport.call(
            "POST",
            "sandboxes",
            self.sandbox_id,
            "network",
            "requests",
            request_id,
            body={"decision": decision},
        )
        return answer
