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
import inspect
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from jupyter_core.application import JupyterApp
from traitlets import Unicode

from jupyter_sandbox._version import __version__
from jupyter_sandbox.cli.text import shown_lines
from jupyter_sandbox.protocol.errors import SandboxError
from jupyter_sandbox.sandbox.lifecycle.reaper import sweep_orphans
from jupyter_sandbox.sandbox.manager import SandboxManager, default_owner
from jupyter_sandbox.sandbox.settings import SandboxSettings

# Arguments a verb taking ``*rest`` may be given: a command's words (exec), ids to remove.
MAX_ARGUMENTS = 100_000
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
    """A verb acting as one owner. A verb declares its ``group`` and ``usage`` (whose first
    word is the verb, and names the app: ``jupyter-sandbox-files-ls``) and its ``run``, whose
    parameters after ``owner`` are the verb's arguments: their number is checked against them
    before anything runs (a ``*rest`` takes any number more), else the usage, status 2."""

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
    verb: ClassVar[str] = ""  # the usage's first word: "delete"

    # The verb's work, ``async def run(self, manager, owner, ARGUMENT...) -> int``: the exit
    # status. Declared as a callable of any arguments, since each verb's differ.
    run: Callable[..., Awaitable[int]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.usage:
            cls.verb = cls.usage.split()[0]
            if "name" not in vars(cls):
                cls.name = "-".join(
                    part for part in ("jupyter-sandbox", cls.group, cls.verb) if part
                )

    def start(self) -> None:
        arguments = self._arguments()

        async def main() -> int:
            manager = SandboxManager.from_config(self.config)
            # With no server, nothing else removes what killed kernels and servers left: each
            # verb's start does (reaper.py), beside its own work, and waits for it at the end
            # rather than leave a removal half done.
            sweep = asyncio.ensure_future(sweep_orphans(manager))
            try:
                return await self.run(manager, self.owner or default_owner(), *arguments)
            finally:
                try:
                    await sweep
                finally:
                    await manager.close()

        self.exit_with(lambda: asyncio.run(main()))

    def _arguments(self) -> list[str]:
        """The verb's arguments, as many as ``run`` takes after ``owner``; else its usage."""
        taken = list(inspect.signature(self.run).parameters.values())[2:]
        least = sum(p.kind is p.POSITIONAL_OR_KEYWORD and p.default is p.empty for p in taken)
        variadic = any(p.kind is p.VAR_POSITIONAL for p in taken)
        most = MAX_ARGUMENTS if variadic else len(taken)
        if not least <= len(self.extra_args) <= most:
            self.usage_error()
        return [str(arg) for arg in self.extra_args]

    def usage_error(self) -> None:
        """Print the verb's usage and exit with status 2 (wrong arguments)."""
        verb = " ".join(part for part in ("jupyter sandbox", self.group, self.usage) if part)
        print(f"usage: {verb}", file=sys.stderr)
        self.exit(2)
