"""How a server whose kernels are a gateway's stops: cleanly on SIGINT, and even without it.

Both are Jupyter Server's stop (``ServerApp._stop``), which shuts the server's kernels down
first: at the gateway, where a kernel left running keeps its unnamed sandbox with it.

- JupyterHub stops a user's server with SIGINT (then SIGTERM after
  ``Spawner.interrupt_timeout``), which Jupyter Server without a terminal takes for an interrupt
  that skips its clean-up. :func:`stop_on_sigint` makes SIGINT the stop.
- When the gateway does not answer (stopped, or unreachable), that shutdown raises, the stop
  with it, and the server runs on until it is killed. :func:`stop_without_gateway` lets the
  stop go on: the kernels are left to the gateway, whose culler ends them
  (docs/how-to/jupyterhub-gateway.md, "Lifetimes").
"""

from __future__ import annotations

import logging
import signal
import sys
from typing import Any

from jupyter_core.utils import ensure_async
from tornado import web

log = logging.getLogger(__name__)


def stop_on_sigint(serverapp: Any) -> None:
    """SIGINT stops the server as SIGTERM does, unless a person at a terminal runs it."""
    if sys.stdin is not None and sys.stdin.isatty():
        return  # Jupyter Server's own handler asks the person at the terminal
    signal.signal(signal.SIGINT, serverapp._signal_stop)


def stop_without_gateway(serverapp: Any) -> None:
    """The server's stop goes on when its gateway cannot shut the kernels down."""
    manager = serverapp.kernel_manager
    shutdown_all = manager.shutdown_all

    async def shut_down_all_or_leave_them(now: bool = False) -> None:
        try:
            await ensure_async(shutdown_all(now=now))
        except (web.HTTPError, OSError, TimeoutError) as exc:
            log.warning(
                "the gateway did not shut this server's kernels down (%s): they are left to "
                "it, and its culler ends them",
                exc,
            )

    # On the instance: Jupyter Server chose the class (GatewayMappingKernelManager) before
    # extensions load, and calls this method once, from its stop.
    manager.shutdown_all = shut_down_all_or_leave_them
