"""The bases of ``jupyter sandbox``'s apps: :class:`SandboxCommandApp`, of every verb and group
of verbs, and :class:`OwnerCommand`, of the verbs that act as one owner: ``jupyter sandbox
snapshot ...`` (cli/snapshots.py), ``jupyter sandbox files ...`` (cli/files.py), ``stop``,
``restart``, ``pause``, ``resume``, ``exec`` (cli/sandboxes.py) and more.

Each verb is a small JupyterApp reading ``jupyter_sandbox_config.py``, taking JupyterApp's own
options (``--log-level``, ``--config``, ``--debug``...) besides its own. An OwnerCommand acts as
the owner ``--owner`` names (default: JUPYTER_SANDBOX_OWNER, JUPYTERHUB_USER or the OS user),
with one SandboxManager for its run. A SandboxError is printed as ``error: <message>``, status
1; wrong arguments print the verb's usage, status 2.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from jupyter_core.application import JupyterApp
from traitlets import Unicode

from jupyter_sandbox._version import __version__
from jupyter_sandbox.cli.text import shown_lines
from jupyter_sandbox.protocol.errors import SandboxError
from jupyter_sandbox.sandbox.lifecycle.reaper import sweep_orphans
from jupyter_sandbox.sandbox.manager import SandboxManager, default_owner
from jupyter_sandbox.sandbox.settings import SandboxSettings

BROKEN_PIPE = 141  # what read the output left (``| head``), as a shell has it (SIGPIPE)


def reader_left() -> int:
    """What a verb returns once what reads its output stopped (``| head``): standard output
    goes to /dev/null, so that the interpreter's own flush at exit fails no more and the verb
    ends quietly, as a program killed by SIGPIPE; the status is a shell's for that."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return BROKEN_PIPE


class SandboxCommandApp(JupyterApp):
    """The base of every ``jupyter sandbox`` app: this package's version and config file.

    A class's ``aliases`` and ``flags`` add to those of the classes it derives from, down to
    JupyterApp's, instead of replacing them as a class attribute would: a verb that declared
    ``aliases = {"owner": ...}`` lost ``--log-level`` and ``--config``, and one that declared
    flags lost ``--debug``, which every Jupyter app takes.
    """

    version = __version__
    config_file_name = "jupyter_sandbox_config"
    classes = [SandboxSettings]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for options in ("aliases", "flags"):
            merged: dict[str, Any] = {}
            for klass in reversed(cls.__mro__):
                merged.update(vars(klass).get(options) or {})
            setattr(cls, options, merged)

    def exit_with(self, work: Callable[[], int]) -> None:
        """Exit with the status ``work`` returns; a SandboxError is ``error: <message>``, 1.
        A message may quote what a sandbox wrote (a file name, a process's output): its
        control characters are escaped."""
        try:
            status = work()
        except SandboxError as exc:
            print(f"error: {shown_lines(exc.message)}", file=sys.stderr)
            status = 1
        self.exit(status)


class OwnerCommand(SandboxCommandApp):
    owner = Unicode(
        config=True,
        help="Whose sandboxes and snapshots (default: JUPYTER_SANDBOX_OWNER, JUPYTERHUB_USER or "
        "the OS user).",
    )
    # Every verb takes --owner: the merged aliases (SandboxCommandApp) give it to each, and the
    # setting of this class reaches its subclasses, as traitlets reads a class's parents' too.
    aliases = {"owner": "OwnerCommand.owner"}
    group = ""  # the verbs' group, as usage lines name it: "snapshot", "files" (or none)
    usage = ""  # the verb and its arguments, e.g. "delete SNAPSHOT_ID"

    def run(self, manager: SandboxManager, owner: str) -> Awaitable[int]:
        """The verb's work; returns the exit status."""
        raise NotImplementedError

    def start(self) -> None:
        async def main() -> int:
            manager = SandboxManager.from_config(self.config)
            # With no server, nothing else removes what killed kernels and servers left: each
            # verb's start does (reaper.py), beside its own work, and waits for it at the end
            # rather than leave a removal half done.
            sweep = asyncio.ensure_future(sweep_orphans(manager))
            try:
                return await self.run(manager, self.owner or default_owner())
            finally:
                try:
                    await sweep
                finally:
                    await manager.close()

        self.exit_with(lambda: asyncio.run(main()))

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
