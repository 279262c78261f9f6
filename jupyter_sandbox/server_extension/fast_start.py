"""The server's zygote for Sandboxed Python kernels: started and stopped with the extension.

Kernels of this server start through kernelspec/sandboxed-python/launch.py, which asks the zygote
named by ``JUPYTER_SANDBOX_ZYGOTE`` for a forked, already-imported proxy kernel (see
jupyter_sandbox/kernel/zygote.py for the protocol and the trust boundary). The variable is set
in this process's environment, which jupyter_client copies into every kernel's. A kernel that
starts before the zygote listens, or after it stopped, starts the ordinary way: the zygote only
ever saves time.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import time
from pathlib import Path
from typing import IO

from jupyter_sandbox.sandbox.host.zygote_process import (
    MAX_SOCKET_PATH,
    ZYGOTE_DIR,
    start_zygote,
    stop_zygote,
)

ZYGOTE_ENV = "JUPYTER_SANDBOX_ZYGOTE"  # the launcher reads the same name

log = logging.getLogger(__name__)


class Zygote:
    """One zygote process, listening at ``<state_dir>/zygote/<server pid>.sock``."""

    def __init__(
        self,
        state_dir: Path,
        logger: logging.Logger | logging.LoggerAdapter[logging.Logger] | None = None,
    ) -> None:
        self.log = logger or log
        # One per server: several servers of one user may share a state directory.
        self.path = state_dir / ZYGOTE_DIR / f"{os.getpid()}.sock"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, stderr: IO[bytes] | None = None) -> bool:
        """Start the zygote and point new kernels at it; False (and why, logged) if it cannot.

        The zygote logs to ``stderr`` (default: the server's), and so do the kernels it forks
        until they take their launchers' streams.
        """
        if len(str(self.path)) > MAX_SOCKET_PATH:
            self.log.warning(
                "fast kernel start off: the socket path %s is too long for a Unix socket; "
                "use a shorter SandboxSettings.state_dir",
                self.path,
            )
            return False
        # A session of its own: a Ctrl-C in the server's terminal is for the server alone.
        self.process = start_zygote(self.path, os.getpid(), stderr)
        os.environ[ZYGOTE_ENV] = str(self.path)
        self.log.info("fast kernel start: zygote pid %s at %s", self.process.pid, self.path)
        return True

    async def wait_ready(self, timeout: float = 30.0) -> bool:
        """Whether the zygote listens within ``timeout`` seconds (kernels need not wait)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.path.exists():
                return True
            if self.process is None or self.process.poll() is not None:
                return False
            await asyncio.sleep(0.05)
        return False

    async def stop(self) -> None:
        """Stop the zygote. Kernels it forked live on: they belong to their launchers."""
        if os.environ.get(ZYGOTE_ENV) == str(self.path):
            del os.environ[ZYGOTE_ENV]
        process, self.process = self.process, None
        if process is not None:
            await asyncio.to_thread(stop_zygote, process, self.path, logger=self.log)
        else:
            self.path.unlink(missing_ok=True)
