"""How much the proxy kernel logs: ``JUPYTER_SANDBOX_LOG_LEVEL``.

The proxy logs to stderr, which Jupyter hands to the server's log (or the caller's). The
variable takes the standard names (``DEBUG``, ``INFO``, ``WARNING``, ``ERROR``) and one more,
``TRACE``: everything ``DEBUG`` logs and a line for every message the relay moves (channel,
direction, type, id and parent id; never content), for following one request through the proxy.
It costs a header decode per message, so it is a level of its own, off unless asked for.
"""

from __future__ import annotations

import logging
import os
import sys

ENVIRONMENT = "JUPYTER_SANDBOX_LOG_LEVEL"
DEFAULT = "INFO"
TRACE = 5  # below DEBUG (10)
logging.addLevelName(TRACE, "TRACE")

NAMES = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def log_level() -> int:
    """The level the environment asks for; an unknown name is said on stderr and INFO used
    (a kernel that would not start over a log setting helps nobody)."""
    name = os.environ.get(ENVIRONMENT, DEFAULT).strip().upper() or DEFAULT
    if name not in NAMES:
        print(
            f"jupyter-sandbox: {ENVIRONMENT}={name!r} is not a log level; using {DEFAULT}. "
            f"Set it to one of {', '.join(NAMES)}.",
            file=sys.stderr,
        )
        name = DEFAULT
    return logging.getLevelName(name)  # type: ignore[no-any-return]
