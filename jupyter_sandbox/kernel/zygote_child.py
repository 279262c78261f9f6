"""The zygote's child: becomes the proxy kernel for one launcher (see zygote.py).

It takes on what an exec'd kernel would have had: the launcher's standard streams, environment,
working directory and umask, a session of its own (as jupyter_client gives kernels, so a Ctrl-C
in the server's terminal does not reach them) and default signal handling. It then runs exactly
what ``python -m jupyter_sandbox.kernel`` runs, and tells the launcher its exit code.

Its launcher stands in for it towards jupyter_client, so it lives only as long as the launcher:
when the launcher dies (SIGKILL from jupyter_client's kill, or any fatal signal), this process
ends at once, as an exec'd kernel killed with SIGKILL would. The context lock goes with it, and an
ephemeral sandbox is left to the reaper, as after any killed kernel.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import traceback
from typing import NoReturn, Protocol

from jupyter_sandbox.kernel import event_loop
from jupyter_sandbox.kernel.__main__ import configure_logging
from jupyter_sandbox.kernel.proxy_kernel import SandboxKernel
from jupyter_sandbox.sandbox.settings import load_config

log = logging.getLogger(__name__)

LAUNCHER_GONE_EXIT = 1


class KernelRequest(Protocol):
    """What the child takes over of a launcher's request (zygote.py's ``Request``, checked
    there): named here rather than imported, so that the zygote imports this module and this
    module nothing of the zygote."""

    @property
    def connection_file(self) -> str: ...
    @property
    def env(self) -> dict[str, str]: ...
    @property
    def cwd(self) -> str: ...
    @property
    def umask(self) -> int: ...
    @property
    def fds(self) -> list[int]: ...
    @property
    def launcher_pid(self) -> int: ...


def become_kernel(request: KernelRequest, conn: socket.socket, launcher: int) -> NoReturn:
    """Run the proxy kernel for ``request``; report its exit code on ``conn``; exit."""
    code = 1
    try:
        for signum in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        os.setsid()
        for target, fd in enumerate(request.fds):
            os.dup2(fd, target)
            os.close(fd)
        os.umask(request.umask)
        os.chdir(request.cwd)
        os.environ.clear()
        os.environ.update(request.env)
        sys.argv = [sys.executable, "-m", "jupyter_sandbox.kernel", "-f", request.connection_file]
        configure_logging()
        code = event_loop.run(_run(request, launcher))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(OSError):  # if the launcher is gone, nobody waits for it
            conn.sendall(json.dumps({"exit": code}).encode() + b"\n")
        _flush()
        os._exit(code)


async def _run(request: KernelRequest, launcher: int) -> int:
    kernel = SandboxKernel(request.connection_file, load_config(), request.launcher_pid)
    asyncio.get_running_loop().add_reader(launcher, _launcher_gone)
    return await kernel.run()


def _launcher_gone() -> None:
    log.warning("the kernel's launcher died: exiting now, as a killed kernel would")
    _flush()
    os._exit(LAUNCHER_GONE_EXIT)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
