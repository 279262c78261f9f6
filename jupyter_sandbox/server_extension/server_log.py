"""The package's module loggers write to the Jupyter Server's log.

Every module of jupyter-sandbox logs through ``logging.getLogger(__name__)``: the core does not
know which application runs it. In a Jupyter Server those records went nowhere below WARNING
(the root logger has no handler there; only Python's last resort printed warnings, without the
server's format): a sandbox culled, an egress request denied, a warm pool claimed were never
in the server's log. Jupyter Server does the same for tornado's loggers, which it joins to its
own; here the package's logger gets the server's handlers and level, and keeps propagating, so
that a handler on the root logger (pytest's, an operator's ``logging`` configuration) sees the
records as before.
"""

from __future__ import annotations

import logging

PACKAGE = "jupyter_sandbox"


def join_server_log(server_log: logging.Logger) -> None:
    """Write the package's records through ``server_log``'s handlers, at its level. Again (a
    second extension load, a test's server) adds no handler twice."""
    package = logging.getLogger(PACKAGE)
    package.setLevel(server_log.getEffectiveLevel())
    for handler in server_log.handlers:
        if handler not in package.handlers:
            package.addHandler(handler)
