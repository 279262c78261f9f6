"""A sandbox's egress policy: ``/api/sandboxes/{id}/network`` and its audit. The policy lives
on the host (code in the sandbox cannot widen its own), and a new one applies to the next
request the sandbox makes, without restarting it or its interpreter.

Agent code reaches it as ``sandbox.network`` (:class:`~jupyter_sandbox.client.Sandbox` makes
one); ``SandboxClient.create(network=...)`` sets the first policy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jupyter_sandbox.client.transport import Transport

# What ``network=`` takes: a policy {"mode", "allow", "deny"}, or only its mode.
NetworkSpec = Mapping[str, Any] | str


def network_policy(spec: NetworkSpec) -> dict[str, Any]:
    """The policy object the API takes for ``spec``: "none", "open" or "allowlist" alone (an
    empty allowlist denies everything) stands for ``{"mode": spec}``."""
    return {"mode": spec} if isinstance(spec, str) else dict(spec)


class SandboxNetwork:
    """The egress policy of one sandbox (``sandbox.network``).

    Modes: ``none`` (no network), ``allowlist`` (only hosts matching ``allow``: ``pypi.org``,
    ``*.example.com``, optionally ``:port``), ``open`` (any public address). ``deny`` patterns
    win in every mode, and the host proxy refuses private, loopback and metadata addresses
    whatever a name resolves to."""

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
