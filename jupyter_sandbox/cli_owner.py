"""The base of the verbs that act as one owner: ``jupyter sandbox snapshot ...`` (cli_snapshots.py),
``jupyter sandbox files ...`` (cli_files.py) and ``stop``, ``restart``, ``pause``, ``resume``
(cli_sandboxes.py).

Each verb is a small JupyterApp reading ``jupyter_sandbox_config.py``, acting as the owner
``--owner`` names (default: JUPYTER_SANDBOX_OWNER, JUPYTERHUB_USER or the OS user), with one
SandboxManager for its run. A SandboxError is printed as ``error: <message>``, status 1; wrong
arguments print the verb's usage, status 2.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable

from jupyter_core.application import JupyterApp
from traitlets import Unicode

from ._version import __version__
from .sandbox import SandboxError, SandboxManager, SandboxSettings
from .sandbox.manager import default_owner


class OwnerCommand(JupyterApp):
    version = __version__
    config_file_name = "jupyter_sandbox_config"
    classes = [SandboxSettings]
    owner = Unicode(
        config=True,
        help="Whose sandboxes and snapshots (default: JUPYTER_SANDBOX_OWNER, JUPYTERHUB_USER or "
        "the OS user).",
    )
    group = ""  # the verbs' group, as usage lines name it: "snapshot", "files" (or none)
    usage = ""  # the verb and its arguments, e.g. "delete SNAPSHOT_ID"

    def run(self, manager: SandboxManager, owner: str) -> Awaitable[int]:
        """The verb's work; returns the exit status."""
        raise NotImplementedError

    def start(self) -> None:
        async def main() -> int:
            manager = SandboxManager.from_config(self.config)
            try:
                return await self.run(manager, self.owner or default_owner())
            finally:
                await manager.close()

        try:
            status = asyncio.run(main())
        except SandboxError as exc:
            print(f"error: {exc.message}", file=sys.stderr)
            status = 1
        self.exit(status)

    def arguments(self, least: int, most: int) -> list[str]:
        """The verb's arguments, ``least`` to ``most`` of them; else its usage, status 2."""
        if not least <= len(self.extra_args) <= most:
            verb = " ".join(part for part in ("jupyter sandbox", self.group, self.usage) if part)
            print(f"usage: {verb}", file=sys.stderr)
            self.exit(2)
        return [str(arg) for arg in self.extra_args]

    def argument(self) -> str:
        """The verb's one argument."""
        return self.arguments(1, 1)[0]


def owner_alias(cls: str) -> dict[str, str]:
    return {"owner": f"{cls}.owner"}
