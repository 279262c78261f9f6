"""Unpausing a container, and waiting until the engine says so for good.

Docker sets a container's paused flag itself when its pause and unpause calls answer, and
again when the runtime's own "paused" and "resumed" events reach it, which they do later, one
container's in order. When the "paused" event of a pause comes after the unpause has answered
(seen on a loaded machine, under runsc), the engine marks the running container paused again
until the "resumed" event follows: for that while it refuses execs ("is paused") and reports the
sandbox as paused, though nothing is frozen. A caller that resumes a sandbox and at once runs a
command in it met exactly that (tests/sandbox/backends/docker/test_exec_gate.py, in CI with two
test workers).

So an unpause here returns once the engine has shown the container unpaused for
:data:`SETTLED` seconds in a row, and within :data:`SETTLE_WAIT` seconds at most: past that,
the container is paused by someone else, which is theirs to say.
"""

from __future__ import annotations

import time
from typing import Any

SETTLED = 0.2  # seconds the engine must show the container unpaused before it counts
SETTLE_WAIT = 5.0  # seconds at most spent waiting for that, after the unpause answered
POLL_INTERVAL = 0.02  # seconds between looks


def unpause(api: Any, container: str) -> None:
    """Blocking: unpause ``container`` (docker-py's low-level ``api``) and wait until the
    engine's paused flag has settled (module docstring). docker-py's errors pass through."""
    api.unpause(container)
    wait_until_settled(api, container)


def wait_until_settled(api: Any, container: str) -> None:
    """Blocking: wait until ``container`` has read unpaused for SETTLED seconds in a row, or
    SETTLE_WAIT seconds have passed."""
    deadline = time.monotonic() + SETTLE_WAIT
    unpaused_since: float | None = None
    while (now := time.monotonic()) < deadline:
        engine_state = api.inspect_container(container).get("State") or {}  # not state.json's
        if engine_state.get("Paused"):
            unpaused_since = None
        elif unpaused_since is None:
            unpaused_since = now
        elif now - unpaused_since >= SETTLED:
            return
        time.sleep(POLL_INTERVAL)
