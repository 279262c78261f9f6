"""The sandbox core: backends, the sandbox manager, settings and errors.

No tornado and no jupyter_server here (a test asserts it): the kernel process and the server
extension both build on this package, never on each other.

The names below are loaded on first use (PEP 562), not when the package is: importing one
stdlib-only module of it, ``jupyter_sandbox.sandbox.errors``, must not import the manager
(jupyter_client, pyzmq, traitlets), which the REST client for agent code
(``jupyter_sandbox.client``) does not need and its machine may not have.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backend import ContainerSpec, SandboxBackend
    from .backend_records import ExecResult, SandboxInfo
    from .errors import SandboxError
    from .limits import SandboxLimits
    from .manager import Sandbox, SandboxManager, SandboxRequest
    from .pool_filler import WarmPool
    from .settings import SandboxSettings

_WHERE = {
    "ContainerSpec": ".backend",
    "SandboxBackend": ".backend",
    "ExecResult": ".backend_records",
    "SandboxInfo": ".backend_records",
    "SandboxError": ".errors",
    "SandboxLimits": ".limits",
    "Sandbox": ".manager",
    "SandboxManager": ".manager",
    "SandboxRequest": ".manager",
    "WarmPool": ".pool_filler",
    "SandboxSettings": ".settings",
}

__all__ = [
    "ContainerSpec",
    "ExecResult",
    "Sandbox",
    "SandboxBackend",
    "SandboxError",
    "SandboxInfo",
    "SandboxLimits",
    "SandboxManager",
    "SandboxRequest",
    "SandboxSettings",
    "WarmPool",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name], __name__), name)
    globals()[name] = value  # once found, an ordinary attribute
    return value
