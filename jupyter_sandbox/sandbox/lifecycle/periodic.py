"""Housekeeping that repeats until cancelled: the warm pool's refill, the culler's pass.

One shape for both, so both fail the same way: a SandboxError (the engine is down, a quota is
reached) is one warning line and the next pass tries again; anything else is a bug, logged with
its traceback, and still does not stop the loop, since a pool that stops refilling or a culler
that stops culling fails silently. Only cancellation (the owner stopping it) ends it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from jupyter_sandbox.protocol.errors import SandboxError


async def repeat(
    step: Callable[[], Awaitable[Any]],
    interval: Callable[[], float],
    what: str,
    log: logging.Logger,
    wake: asyncio.Event | None = None,
) -> None:
    """Await ``step()``, then sleep ``interval()`` seconds (read anew each time, so a changed
    setting applies from the next pass), forever; ``what`` names the step in log lines.

    Setting ``wake`` restarts the sleep with ``interval()`` read anew: how a caller whose next
    pass is now due sooner says so. It never runs a pass by itself, so setting it often costs
    nothing but the reading."""
    while True:
        try:
            await step()
        except SandboxError as exc:
            log.warning("%s: %s", what, exc.message)
        except Exception:
            log.exception("%s failed", what)
        if wake is None:
            await asyncio.sleep(interval())
            continue
        while True:  # set during the step too: then the first wait ends at once
            try:
                await asyncio.wait_for(wake.wait(), interval())
            except TimeoutError:
                break  # slept the whole interval: the next pass is due
            wake.clear()
