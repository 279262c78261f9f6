"""What the network security tests share about a sandbox's forwarder."""

from __future__ import annotations

import asyncio
import time

from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.network.control import TUNNEL_SOCKET


async def forwarder_listening(manager: SandboxManager, sandbox_id: str) -> None:
    """Wait until the sandbox's forwarder listens (it is started beside the kernel's start,
    starting.py): its tunnel socket exists in the sandbox's io directory, within 60 s."""
    socket_path = SandboxDirectory(manager.settings.state_path, sandbox_id).io / TUNNEL_SOCKET
    deadline = time.monotonic() + 60
    while not socket_path.exists():
        assert time.monotonic() < deadline, "the forwarder did not listen within 60 s"
        await asyncio.sleep(0.05)
