"""Starting and stopping a kernel zygote process (jupyter_sandbox/kernel/zygote.py) on the host.

Two owners run one: the server extension, for the kernels of its server
(server_extension/fast_start.py), and the headless warm pool's keeper, for kernels started with
no server (sandbox/lifecycle/pool_keeper.py). Either way it is ``python -m
jupyter_sandbox.kernel.zygote --socket PATH --parent PID`` in a session of its own (a signal to
its owner's group is not for it), and it exits by itself once ``PID`` has ended, so it never
outlives its owner even when the owner is killed. The module is named here, never imported: the
core does not import the proxy kernel.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
from pathlib import Path
from typing import IO

from jupyter_sandbox.sandbox.host.python_command import module_command

ZYGOTE_MODULE = "jupyter_sandbox.kernel.zygote"
ZYGOTE_DIR = "zygote"  # under the state directory, 0700 (the zygote makes it so)
HEADLESS_SOCKET = "headless.sock"  # the keeper's; a server's is named by its pid
MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes on Linux, with room for ".binding"
STOP_SECONDS = 5.0  # the zygote exits at once on SIGTERM: it only imports and forks

log = logging.getLogger(__name__)


def headless_socket(state_dir: Path) -> Path:
    """Where the headless warm pool's zygote listens: a fixed place in the state directory,
    which the kernelspec's launcher computes alike (kernelspec/sandboxed-python/launch.py)."""
    return state_dir / ZYGOTE_DIR / HEADLESS_SOCKET


def start_zygote(
    path: Path, parent_pid: int, stderr: IO[bytes] | None = None
) -> subprocess.Popen[bytes]:
    """Start a zygote listening at ``path`` that lives no longer than ``parent_pid``; it logs
    to ``stderr`` (default: this process's). OSError if it cannot start."""
    argv = module_command(ZYGOTE_MODULE, "--socket", str(path), "--parent", str(parent_pid))
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=stderr, start_new_session=True)


def stop_zygote(
    process: subprocess.Popen[bytes],
    path: Path,
    timeout: float = STOP_SECONDS,
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger] | None = None,
) -> None:
    """Stop ``process`` (SIGTERM; SIGKILL after ``timeout`` seconds) and remove its socket.
    Kernels it forked live on: they belong to their launchers. Blocks up to ``timeout``."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            (logger or log).warning("zygote %s did not stop on SIGTERM; killing it", process.pid)
            process.kill()
            process.wait()
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
