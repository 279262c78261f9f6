"""A Python client for agent code: one user's sandboxes on a Jupyter Server, over its REST API
(jupyter_sandbox/server_extension/openapi.yaml), as E2B's and OpenSandbox's SDKs give them.

It needs the standard library alone (urllib, json): an agent's machine needs none of the
server's dependencies, and importing this package loads none of them (see errors.py for how
the core's error classes are loaded without the core). Start at :class:`SandboxClient`::

    from jupyter_sandbox.client import SandboxClient

    client = SandboxClient("http://127.0.0.1:8888/")  # token from JUPYTER_TOKEN
    with client.create(timeout=600, metadata={"task": "t-42"}) as sandbox:
        sandbox.run_code("import math; r = 2")
        print(sandbox.run_code("math.pi * r**2").text)
        print(sandbox.run("ls -la").stdout)

Modules, one concept each: client.py (the entry point), sandbox.py (one sandbox),
execution.py (code in its interpreter), commands.py (commands, whole, streamed or in the
background), files.py (with file_entry.py, an entry, and file_watch.py,
watching a directory), network.py, ports.py (URLs of servers in the sandbox), errors.py (the
server's errors as the core's classes), transport.py (HTTP) and events.py (Server-Sent Events).
"""

from __future__ import annotations

from jupyter_sandbox.client import errors
from jupyter_sandbox.client.client import SandboxClient
from jupyter_sandbox.client.commands import BackgroundCommand, CommandOutput, CommandResult
from jupyter_sandbox.client.errors import *  # noqa: F403  (the error classes: errors.__all__ names them)
from jupyter_sandbox.client.execution import CodeError, CodeFailedError, Execution
from jupyter_sandbox.client.file_entry import FileEntry
from jupyter_sandbox.client.file_watch import DirectoryWatch, FileChange, WatchHandle
from jupyter_sandbox.client.files import SandboxFiles
from jupyter_sandbox.client.network import SandboxNetwork
from jupyter_sandbox.client.ports import Port, SandboxPorts
from jupyter_sandbox.client.sandbox import Sandbox

# The client's own names, then its error classes as errors.py lists them (the one list of them).
__all__ = [
    "BackgroundCommand",
    "CodeError",
    "CodeFailedError",
    "CommandOutput",
    "CommandResult",
    "DirectoryWatch",
    "Execution",
    "FileChange",
    "FileEntry",
    "Port",
    "Sandbox",
    "SandboxClient",
    "SandboxFiles",
    "SandboxNetwork",
    "SandboxPorts",
    "WatchHandle",
]
__all__ += errors.__all__
