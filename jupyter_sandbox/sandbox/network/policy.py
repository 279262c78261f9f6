"""Network policies: ``none``, ``allowlist`` (domain patterns), ``ask`` and ``open``, and their
decisions.

A policy is data kept in the sandbox's host-side state file (never reachable from inside), so
the sandbox cannot change its own egress. It is parsed from three places, all checked the same
way: the REST body (``{"mode": "allowlist", "allow": [...], "deny": [...]}``), the
``NetworkSettings.default_policy`` setting, and the kernel's ``JUPYTER_SANDBOX_NETWORK``
variable, whose text form is ``none``, ``open``, or a comma-separated allowlist where a pattern
starting with ``!`` denies (``pypi.org,*.pythonhosted.org,!evil.pythonhosted.org``); the
item ``ask`` among them makes it an ``ask`` policy (``ask,pypi.org``: ask for anything else).

``ask`` is an allowlist whose misses are held by the host proxy and put to the owner instead of
refused (asks.py): the owner allows the one request, allows its ``host:port`` for the sandbox
(added to ``allow``, so the next request passes without asking), or denies it. Deny patterns
and address literals are refused without asking, as in an allowlist.

Patterns are ``example.com`` (that name only), ``*.example.com`` (every name below it, not the
apex), each optionally with ``:port`` (else any port). Deny patterns win over allow patterns; an
allowlist without allow patterns denies everything (fail closed). Which *addresses* a name may
reach is decided afterwards, in every mode, by addresses.py.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any

from jupyter_sandbox.protocol.errors import InvalidSettingError
from jupyter_sandbox.sandbox.host.state_record import SandboxState

MODES = ("none", "allowlist", "ask", "open")
# The modes whose ``allow`` patterns let a request through.
MODES_WITH_ALLOW = ("allowlist", "ask")
# The item of the text form that makes an allowlist an ask policy.
ASK_ITEM = "ask"
ENV_VAR = "JUPYTER_SANDBOX_NETWORK"
MAX_PATTERNS = 256
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")


@dataclass(frozen=True)
class HostPattern:
    """One domain pattern: ``domain`` exactly, or every name below it when ``wildcard``."""

    domain: str
    wildcard: bool = False
    port: int | None = None

    @classmethod
    def parse(cls, text: str) -> HostPattern:
        if not isinstance(text, str):
            raise InvalidSettingError(f"a network pattern must be a string, not {text!r}")
        original = text
        text = text.strip().lower()
        port: int | None = None
        host, sep, port_text = text.rpartition(":")
        if sep:
            if not (port_text.isascii() and port_text.isdigit()) or not 0 < int(port_text) < 65536:
                raise InvalidSettingError(
                    f"network pattern {original!r}: the port must be a number from 1 to 65535"
                )
            port, text = int(port_text), host
        wildcard = text.startswith("*.")
        domain = (text[2:] if wildcard else text).rstrip(".")
        if text in ("*", "*.") or domain == "*":
            raise InvalidSettingError(
                f"network pattern {original!r} would allow every host: use the policy mode "
                "'open' for that"
            )
        if _is_ip(domain) or domain.startswith("["):
            raise InvalidSettingError(
                f"network pattern {original!r} is an address: an allowlist names hosts "
                "(e.g. 'pypi.org' or '*.example.com')"
            )
        if not domain.isascii():
            raise InvalidSettingError(
                f"network pattern {original!r}: write international names in their ASCII "
                "(xn--) form"
            )
        labels = domain.split(".")
        if len(domain) > 253 or not all(_LABEL.match(label) for label in labels):
            raise InvalidSettingError(
                f"network pattern {original!r} is malformed: use 'name.example', "
                "'*.name.example', optionally with ':port'"
            )
        if len(labels) < 2:
            raise InvalidSettingError(
                f"network pattern {original!r} names a whole top-level domain or a single "
                "label: name a registered domain such as 'example.com' or '*.example.com'"
            )
        return cls(domain, wildcard, port)

    def matches(self, host: str, port: int) -> bool:
        if self.port is not None and port != self.port:
            return False
        if self.wildcard:
            return host.endswith("." + self.domain)
        return host == self.domain

    def __str__(self) -> str:
        text = ("*." if self.wildcard else "") + self.domain
        return text if self.port is None else f"{text}:{self.port}"


@dataclass(frozen=True)
class PolicyDecision:
    allowed: bool
    rule: str  # what decided: "open", "allow pypi.org", "deny *.evil.test", "not in allowlist"
    ask: bool = False  # not allowed yet: the owner is to be asked (mode ask)


@dataclass(frozen=True)
class NetworkPolicy:
    mode: str = "none"
    allow: tuple[HostPattern, ...] = ()
    deny: tuple[HostPattern, ...] = ()

    def decide(self, host: str, port: int) -> PolicyDecision:
        """Whether the policy lets the sandbox ask for ``host``:``port`` (before any lookup)."""
        host = normalize_host(host)
        if self.mode == "none":
            return PolicyDecision(False, "network policy is none")
        for pattern in self.deny:
            if pattern.matches(host, port):
                return PolicyDecision(False, f"deny {pattern}")
        if self.mode == "open":
            return PolicyDecision(True, "open")
        if _is_ip(host):
            return PolicyDecision(False, "address literal (the allowlist names hosts)")
        for pattern in self.allow:
            if pattern.matches(host, port):
                return PolicyDecision(True, f"allow {pattern}")
        if self.mode == "ask":
            return PolicyDecision(False, "not in allowlist: the owner is asked", ask=True)
        return PolicyDecision(False, "not in allowlist")

    def allowing(self, host: str, port: int) -> NetworkPolicy:
        """This policy with ``host:port`` added to its allow patterns (an owner's "allow for
        this sandbox" of a held request); itself when a pattern allows it already."""
        if self.decide(host, port).allowed:
            return self
        pattern = HostPattern.parse(f"{normalize_host(host)}:{port}")
        if len(self.allow) >= MAX_PATTERNS:
            raise InvalidSettingError(
                f"the sandbox's allowlist has {MAX_PATTERNS} patterns already: allow this "
                "request once, or replace the policy with fewer, wider patterns"
            )
        return NetworkPolicy(self.mode, (*self.allow, pattern), self.deny)

    @property
    def allows_network(self) -> bool:
        return self.mode != "none"

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "allow": [str(p) for p in self.allow],
            "deny": [str(p) for p in self.deny],
        }

    def describe(self) -> str:
        """One line for the kernel's banner."""
        if self.mode == "none":
            return "none"
        deny = f", deny {', '.join(map(str, self.deny))}" if self.deny else ""
        if self.mode == "open":
            return f"open (public addresses only{deny})"
        if self.mode == "ask":
            allowed = ", ".join(map(str, self.allow)) or "nothing yet"
            return f"ask (allowed: {allowed}{deny}; anything else is put to the owner)"
        allowed = ", ".join(map(str, self.allow)) or "nothing: every request is denied"
        return f"allowlist ({allowed}{deny}) through the host proxy"

    @classmethod
    def from_dict(cls, data: Any) -> NetworkPolicy:
        """From the REST form: ``{"mode": ..., "allow": [...], "deny": [...]}``."""
        if not isinstance(data, dict):
            raise InvalidSettingError(
                'network must be an object such as {"mode": "allowlist", "allow": ["pypi.org"]}'
            )
        unknown = sorted(set(data) - {"mode", "allow", "deny"})
        if unknown:
            raise InvalidSettingError(
                f"unknown network field(s) {', '.join(map(repr, unknown))}; known: allow, deny, mode"
            )
        mode = data.get("mode")
        if mode not in MODES:
            raise InvalidSettingError(
                f"network.mode must be one of {', '.join(MODES)}, not {mode!r}"
            )
        allow, deny = data.get("allow", []), data.get("deny", [])
        for name, value in (("allow", allow), ("deny", deny)):
            if not isinstance(value, list) or len(value) > MAX_PATTERNS:
                raise InvalidSettingError(
                    f"network.{name} must be a list of at most {MAX_PATTERNS} host patterns"
                )
        if mode not in MODES_WITH_ALLOW and allow:
            raise InvalidSettingError(
                f"network.allow is only for the modes 'allowlist' and 'ask', not {mode!r}"
            )
        return cls(
            mode,
            tuple(HostPattern.parse(p) for p in allow),
            tuple(HostPattern.parse(p) for p in deny),
        )

    @classmethod
    def from_text(cls, text: str) -> NetworkPolicy:
        """From the text form of JUPYTER_SANDBOX_NETWORK and the config default."""
        text = text.strip()
        if text.lower() in ("none", "open"):
            return cls(text.lower())
        items = [item.strip() for item in text.split(",") if item.strip()]
        if not items:
            return cls("allowlist")  # an empty allowlist: deny all
        mode = "ask" if any(i.lower() == ASK_ITEM for i in items) else "allowlist"
        items = [i for i in items if i.lower() != ASK_ITEM]
        allow = tuple(HostPattern.parse(i) for i in items if not i.startswith("!"))
        deny = tuple(HostPattern.parse(i[1:]) for i in items if i.startswith("!"))
        return cls(mode, allow, deny)

    @classmethod
    def parse(cls, value: Any) -> NetworkPolicy:
        """From any accepted form: a policy, a dict (REST) or a string (text form)."""
        if isinstance(value, NetworkPolicy):
            return value
        if isinstance(value, str):
            return cls.from_text(value)
        return cls.from_dict(value)


NO_NETWORK = NetworkPolicy("none")


def policy_of_state(state: SandboxState) -> NetworkPolicy:
    """The policy recorded in a sandbox's state file; none when it has none (pool members)."""
    recorded = state.get("network")
    if recorded is None:
        return NO_NETWORK
    try:
        return NetworkPolicy.from_dict(recorded)
    except InvalidSettingError:
        return NO_NETWORK  # a damaged record fails closed


def normalize_host(host: str) -> str:
    host = host.strip().lower().rstrip(".")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return False
    return True
