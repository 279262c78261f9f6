"""The sandbox core: backends, the sandbox manager, settings and errors.

No tornado and no jupyter_server here (a test asserts it): the kernel process and the server
extension both build on this package, never on each other.
"""

from __future__ import annotations

from .backend import ContainerSpec, SandboxBackend
from .backend_records import ExecResult, SandboxInfo
from .errors import SandboxError
from .limits import SandboxLimits
from .manager import Sandbox, SandboxManager, SandboxRequest
from .pool_filler import WarmPool
from .settings import SandboxSettings

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
