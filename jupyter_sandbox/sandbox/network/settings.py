"""Settings of sandbox networking, shared by the kernel and the server (jupyter_sandbox_config.py).

``c.NetworkSettings.default_policy = "pypi.org,*.pythonhosted.org"`` gives every new sandbox
that allowlist unless its creator names another policy.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from jupyter_core.paths import jupyter_data_dir
from traitlets import Bool, Dict, Float, Integer, List, Unicode, default, validate
from traitlets.config import LoggingConfigurable

from jupyter_sandbox.protocol.errors import InvalidSettingError
from jupyter_sandbox.sandbox.network.addresses import (
    AddressGuard,
    check_private_ranges,
    host_addresses,
)
from jupyter_sandbox.sandbox.network.policy import NetworkPolicy

# Where the forwarder inside the sandbox listens (its loopback; the sandbox has nothing else).
FORWARDER_PORT = 3128


class NetworkSettings(LoggingConfigurable):
    """Egress of sandboxes: the default policy and what the host proxy may reach."""

    default_policy = Unicode(
        "none",
        config=True,
        help="""Policy of new sandboxes whose creator names none: 'none' (no network), 'open'
        (any public address), or a comma-separated allowlist of host patterns ('pypi.org',
        '*.example.com', 'example.com:443'; a leading '!' denies). An empty allowlist denies
        everything; the item 'ask' among the patterns ('ask' alone, or 'ask,pypi.org') holds a
        request to any other host and asks the owner (see ask_timeout). A kernel's
        JUPYTER_SANDBOX_NETWORK and REST's 'network' field override it.""",
    )
    allow_private_ranges = List(
        Unicode(),
        default_value=[],
        config=True,
        help="""CIDR ranges inside the private ones (10/8, 172.16/12, 192.168/16, 100.64/10,
        fc00::/7) that the host proxy may connect to, e.g. ['10.1.2.0/24'] for an internal
        package mirror. Loopback, link-local, cloud metadata and this host's own addresses can
        never be opened. Empty (default): no private address is reachable.""",
    )
    idle_tunnels = Integer(
        4,
        config=True,
        help="""Connections the host proxy keeps open to each sandbox's forwarder, ready for the
        next requests (the sandbox cannot connect out to the host, so the host connects in).""",
    )
    max_connections = Integer(
        64,
        config=True,
        help="Concurrent proxied connections per sandbox; more wait for one to end.",
    )
    connect_timeout = Integer(
        10, config=True, help="Seconds the host proxy waits for an upstream server to accept."
    )
    audit_max_bytes = Integer(
        1024**2,
        config=True,
        help="""Size in bytes of a sandbox's egress audit log before it is rotated (one previous
        file is kept, so at most twice this is stored per sandbox).""",
    )
    ask_timeout = Float(
        60.0,
        config=True,
        help="""Seconds a request held by a sandbox's 'ask' policy waits for its owner's
        decision (allow once, allow for the sandbox, deny); unanswered by then it is denied, and
        the sandbox's program is told so.""",
    )
    max_pending_requests = Integer(
        8,
        config=True,
        help="""Requests of one sandbox that may wait for a decision at once under its 'ask'
        policy (a count); one more is refused at once with a message that says so.""",
    )
    tls_inspection = Bool(
        False,
        config=True,
        help="""Whether the host proxy terminates the TLS of every https request (CONNECT) with
        the sandbox's own certificate authority, reads the HTTP inside, refuses a request whose
        Host or TLS server name is not the CONNECT host (domain fronting), and opens its own TLS
        to the server, verified with the host's trust store. Off (default): only hosts that a
        credential names are inspected (so the proxy can add its headers); the rest are
        tunneled, TLS untouched, as before.""",
    )
    upstream_extra_ca_file = Unicode(
        "",
        config=True,
        help="""FOR TESTS ONLY: a PEM file of one more CA that the host proxy trusts, besides
        the host's trust store, when it verifies an upstream server under TLS inspection (a
        test's local TLS server signed by a test CA). Empty (default): the host's store only.""",
    )
    credentials_dir = Unicode(
        config=True,
        help="""Host directory (made 0700) of the credentials owners give the server for the
        host proxy to add to their sandboxes' requests (one 0600 file per owner; REST
        /api/credentials, 'jupyter sandbox credentials'). Default: <jupyter data dir>/
        sandbox-credentials, so they outlive the server as snapshots do. A kernel launched in
        it, or in a folder holding it, gets no /workspace: no sandbox is shown it.""",
    )
    allow_loopback_for_tests = Bool(
        False,
        config=True,
        help="""FOR TESTS ONLY: lets the host proxy connect to 127.0.0.1 (only that address), so
        that test servers on the host's loopback can stand in for the internet. Never set it
        otherwise: sandbox code could then reach every service listening on 127.0.0.1.""",
    )
    test_host_addresses = Dict(
        value_trait=Unicode(),
        default_value={},
        config=True,
        help="""FOR TESTS ONLY: names the host proxy resolves to the given address instead of
        asking DNS, e.g. {'allowed.test': '127.0.0.1'}. The address is still checked.""",
    )

    @default("credentials_dir")
    def _default_credentials_dir(self) -> str:
        return os.path.join(jupyter_data_dir(), "sandbox-credentials")

    @property
    def credentials_path(self) -> Path:
        return Path(self.credentials_dir)

    @validate("default_policy")
    def _check_policy(self, proposal: dict[str, Any]) -> str:
        NetworkPolicy.from_text(str(proposal["value"]))  # InvalidSettingError names the problem
        return str(proposal["value"])

    @validate("ask_timeout")
    def _check_ask_timeout(self, proposal: dict[str, Any]) -> float:
        value = float(proposal["value"])
        if not 0 < value <= 24 * 3600:
            raise InvalidSettingError(
                f"NetworkSettings.ask_timeout must be from 0 (exclusive) to 86400 seconds, not {value}"
            )
        return value

    @validate("max_pending_requests")
    def _check_max_pending(self, proposal: dict[str, Any]) -> int:
        value = int(proposal["value"])
        if not 1 <= value <= 1024:
            raise InvalidSettingError(
                f"NetworkSettings.max_pending_requests must be from 1 to 1024, not {value}"
            )
        return value

    @validate("allow_private_ranges")
    def _check_ranges(self, proposal: dict[str, Any]) -> list[str]:
        check_private_ranges(proposal["value"])
        return list(proposal["value"])

    def default(self) -> NetworkPolicy:
        return NetworkPolicy.from_text(self.default_policy)

    def policy_for(self, requested: Any) -> NetworkPolicy:
        """The policy of a new sandbox: the creator's (REST dict or text), else the default.
        InvalidSettingError names what is wrong with a bad one."""
        if requested is None or (isinstance(requested, str) and not requested.strip()):
            return self.default()
        return NetworkPolicy.parse(requested)

    def proxy_options(self) -> dict[str, Any]:
        """What the host proxy process needs of these settings (passed to it as JSON)."""
        return {
            "allow_private_ranges": list(self.allow_private_ranges),
            "allow_loopback_for_tests": bool(self.allow_loopback_for_tests),
            "test_host_addresses": dict(self.test_host_addresses),
            "idle_tunnels": int(self.idle_tunnels),
            "max_connections": int(self.max_connections),
            "connect_timeout": int(self.connect_timeout),
            "audit_max_bytes": int(self.audit_max_bytes),
            "ask_timeout": float(self.ask_timeout),
            "max_pending_requests": int(self.max_pending_requests),
            "credentials_dir": str(self.credentials_path.absolute()),
            "tls_inspection": bool(self.tls_inspection),
            "upstream_extra_ca_file": str(self.upstream_extra_ca_file),
        }


def guard_from_options(options: dict[str, Any]) -> AddressGuard:
    return AddressGuard(
        allowed_private=check_private_ranges(options.get("allow_private_ranges", [])),
        allow_loopback_for_tests=bool(options.get("allow_loopback_for_tests", False)),
        host_addresses=host_addresses(),
    )
