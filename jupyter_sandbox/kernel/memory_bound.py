"""The memory a proxy kernel may take on the host, whatever its sandbox sends.

ZMQ assembles each message from the sandbox's kernel whole before the relay reads it, and the
sandbox chooses its size: one part of a gigabyte, or one small buffer named in a thousand
parts, which costs the sandbox nothing and the host all of it, in every kernel at once.
Reading it first and judging it after is too late, so the process is bounded before it reads,
in two ways that need no privileges (``SandboxSettings.proxy_memory_limit``, 0 for none):

* a part from the sandbox may hold at most a quarter of the bound (ZMQ_MAXMSGSIZE on the
  sandbox's sockets, :func:`part_bound`): ZMQ drops the connection of a peer that sends a
  larger one and connects again; that message is lost, the kernel runs on;
* the process's data (RLIMIT_DATA: its heap and private mappings) may not grow past the bound
  (:func:`bound_memory`): a message of many parts that passed the first bound cannot be
  allocated, and libzmq drops the connection or ends the process, which Jupyter's restarter
  replaces. Only this kernel's process pays, and only its owner notices.

The output cap (output_cap.py) bounds what reaches frontends; this bounds what the host holds
on the way.
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)


def bound_memory(limit: int) -> None:
    """Bound this process's data to ``limit`` bytes (0: leave it as it is). The hard limit stays:
    processes this one starts (a lifeline, a headless pool's keeper) inherit the bound and may
    raise it again."""
    if limit <= 0:
        return
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY and hard < limit:
        limit = hard  # an administrator's lower bound stands
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    log.debug("this kernel's process may allocate %d bytes", limit)


def part_bound(limit: int) -> int:
    """The largest message part taken from the sandbox, in bytes; -1 (ZMQ's none) for none."""
    return limit // 4 if limit > 0 else -1
