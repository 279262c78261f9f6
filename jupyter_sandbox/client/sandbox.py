"""One sandbox of the user's, as agent code drives it over REST: code in its live interpreter,
commands (whole, streamed, in the background), its files, network and ports, its lifetime.

:class:`~jupyter_sandbox.client.SandboxClient` makes Sandbox objects (``create``, ``list``,
``get``); agent code calls their methods. Used as a context manager, a sandbox is removed when
the block ends: ``with client.create() as sandbox: ...``. Each method is one request (or, for
a background command's ``follow``/``wait``, a few) and raises the server's SandboxError.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from jupyter_sandbox.client.commands import (
    BackgroundCommand,
    Command,
    CommandResult,
    TextCallback,
    command_body,
    list_commands,
    run_command,
    start_command,
)
from jupyter_sandbox.client.errors import SandboxError, SandboxNotFoundError
from jupyter_sandbox.client.execution import DisplayCallback, Execution, run_code
from jupyter_sandbox.client.files import SandboxFiles
from jupyter_sandbox.client.network import SandboxNetwork
from jupyter_sandbox.client.ports import SandboxPorts
from jupyter_sandbox.client.transport import Transport

log = logging.getLogger(__name__)

DEFAULT_RUN_TIMEOUT = 60.0  # seconds, as the server's own default for code and commands


class Sandbox:
    """A sandbox: ``id``, ``info`` (the API's model of it: status, runtime, expires,
    metadata, kernel...; as last fetched, :meth:`refresh` fetches it again), ``files``,
    ``network`` and ``ports``."""

    def __init__(self, transport: Transport, info: dict[str, Any]) -> None:
        self._transport = transport
        self.info = info
        self.files = SandboxFiles(transport, self.id)
        self.network = SandboxNetwork(transport, self.id)
        self.ports = SandboxPorts(transport, self.id)

    def __repr__(self) -> str:
        return f"Sandbox({self.id!r}, status={self.status!r})"

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exception: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            self.remove()
        except SandboxNotFoundError:
            pass  # already gone: removed in the block, or by its timeout
        except SandboxError as error:
            if exception is None:
                raise
            # The block's own exception says more; this one is only logged.
            log.warning("sandbox %s was not removed: %s", self.id, error)

    @property
    def id(self) -> str:
        return str(self.info["id"])

    @property
    def status(self) -> str:
        """created, running, paused, restarting, removing, exited or dead (as last fetched)."""
        return str(self.info.get("status", ""))

    @property
    def metadata(self) -> dict[str, str]:
        return dict(self.info.get("metadata") or {})

    def _call(self, method: str, *rest: str, **kwargs: Any) -> Any:
        return self._transport.call(method, "sandboxes", self.id, *rest, **kwargs)

    def refresh(self) -> dict[str, Any]:
        """Fetch the sandbox's model again; ``info``, updated."""
        self.info = self._call("GET")
        return self.info

    def run_code(
        self,
        code: str,
        timeout: float = DEFAULT_RUN_TIMEOUT,
        on_stdout: TextCallback | None = None,
        on_stderr: TextCallback | None = None,
        on_display: DisplayCallback | None = None,
    ) -> Execution:
        """Run Python (and IPython: magics, ``!`` lines) in the sandbox's live interpreter,
        as a notebook cell: it sees what earlier runs and cells left, and leaves its own.
        Past ``timeout`` seconds (from its own start, not its wait behind other code) it is
        interrupted. With a callback the output is streamed: each piece goes to its callback
        as it comes (``on_display`` gets display events whole); a callback that raises ends
        the run. An exception in the code is data in the Execution, not raised here:
        ``execution.raise_for_error()`` raises it. Raises SandboxConflictError if the
        sandbox is paused or stopped."""
        return run_code(self._transport, self.id, code, timeout, on_stdout, on_stderr, on_display)

    def run(
        self,
        command: Command,
        timeout: float = DEFAULT_RUN_TIMEOUT,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: str | None = None,
        on_stdout: TextCallback | None = None,
        on_stderr: TextCallback | None = None,
    ) -> CommandResult:
        """Run ``command`` (a list of strings as it is, a string by /bin/sh -c) to its end,
        as the sandbox's user in ``cwd`` (default /workspace), with ``env`` added to its
        environment and ``stdin`` as its whole standard input. Past ``timeout`` seconds it is
        killed with everything it started (``timed_out``). With a callback the output is
        streamed to it as it comes, uncapped (else stdout is kept up to 16 MiB)."""
        body = command_body(command, env, cwd) | {"timeout": timeout}
        if stdin is not None:
            body["stdin"] = stdin
        return run_command(self._transport, self.id, body, on_stdout, on_stderr)

    def start(
        self, command: Command, env: Mapping[str, str] | None = None, cwd: str | None = None
    ) -> BackgroundCommand:
        """Start ``command`` in the background and return at once: it runs, with no time
        limit, until it ends or is removed; it outlives a restart of the interpreter, not the
        sandbox. Its output (stdout and stderr interleaved) is kept in the sandbox's /tmp."""
        return start_command(self._transport, self.id, command_body(command, env, cwd))

    def commands(self) -> list[BackgroundCommand]:
        """The background commands, running or ended (until removed), oldest first."""
        return list_commands(self._transport, self.id)

    def set_timeout(self, seconds: float) -> None:
        """Have the sandbox removed ``seconds`` from now (sooner or later than before, at
        most the server's time to live: InvalidRequestError says how many seconds are left);
        ``info["expires"]`` shows the new deadline."""
        self.info = self._call("PUT", "timeout", body={"timeout": seconds})

    def pause(self) -> None:
        """Freeze every process of the sandbox, its memory kept (runs and commands are
        refused with SandboxConflictError until :meth:`resume`)."""
        self.info = self._call("POST", "pause")

    def resume(self) -> None:
        """Thaw a paused sandbox."""
        self.info = self._call("POST", "resume")

    def restart(self) -> None:
        """A fresh interpreter in the same sandbox: variables go, files in /workspace and
        background commands stay."""
        self.info = self._call("POST", "restart")

    def stats(self) -> dict[str, Any]:
        """Resource use measured now: CPU, memory against its limit, processes, workspace
        bytes."""
        answer: dict[str, Any] = self._call("GET", "stats")
        return answer

    def attestation(self) -> dict[str, Any]:
        """The isolation a probe inside the sandbox measured when it started."""
        answer: dict[str, Any] = self._call("GET", "attestation")
        return answer

    def snapshot(self, note: str | None = None) -> dict[str, Any]:
        """Store a snapshot of the sandbox's /workspace (its files only: not the
        interpreter's variables, nor processes); its model, whose ``id``
        ``SandboxClient.create(snapshot=...)`` restores into a new sandbox."""
        body = {} if note is None else {"note": note}
        answer: dict[str, Any] = self._call("POST", "snapshots", body=body)
        return answer

    def remove(self) -> None:
        """Stop the sandbox and remove it with its files (SandboxNotFoundError if it is gone
        already)."""
        self._call("DELETE")
