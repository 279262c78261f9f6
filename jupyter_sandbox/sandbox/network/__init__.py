"""Sandbox egress: policies, the address guard, the host proxy, its tunnels and its audit.

See policy.py for what a policy is, egress_proxy.py for how a request is decided, tunnels.py for why
the host connects into the sandbox, and control.py for who starts and stops what.
"""

from __future__ import annotations

from jupyter_sandbox.protocol.errors import NetworkSetupError
from jupyter_sandbox.sandbox.network.audit import read_audit
from jupyter_sandbox.sandbox.network.control import apply_policy, proxy_running, stop_proxy
from jupyter_sandbox.sandbox.network.policy import (
    ENV_VAR,
    NO_NETWORK,
    HostPattern,
    NetworkPolicy,
    policy_of_state,
)
from jupyter_sandbox.sandbox.network.settings import FORWARDER_PORT, NetworkSettings

__all__ = [
    "ENV_VAR",
    "FORWARDER_PORT",
    "NO_NETWORK",
    "HostPattern",
    "NetworkPolicy",
    "NetworkSettings",
    "NetworkSetupError",
    "apply_policy",
    "policy_of_state",
    "proxy_running",
    "read_audit",
    "stop_proxy",
]
