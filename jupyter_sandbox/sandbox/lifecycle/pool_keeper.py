"""The warm pool of kernels started with no Jupyter server: ``python -m
jupyter_sandbox.sandbox.lifecycle.pool_keeper OWNER``.

nbconvert, nbclient, papermill and plain jupyter_client scripts start Sandboxed Python with no
server, so no server keeps a warm pool for them and every kernel paid a cold sandbox start. The
first such kernel of an owner (kernel/proxy_kernel.py, once its own sandbox answers) starts this
process, detached; it runs the server's pool (pool_filler.WarmPool) for the keys those kernels
missed (pool.record_wanted: the notebook's folder, runtime, image, limits), so the next kernel
of the same request only claims a member (pool.py). Only one process per owner and state
directory refills (WarmPool's lock): a server, or another keeper, already doing it makes this
one exit at once. Once no member has been claimed and no key wanted anew for
``HeadlessPool.idle_timeout`` seconds, or on SIGTERM, it removes its unclaimed members and
exits. Nothing about a member differs from a sandbox started for the kernel itself: the same
container, made for the very same request (the pool key covers all of it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO

from traitlets import Bool, Float
from traitlets.config import Config, LoggingConfigurable

from jupyter_sandbox.protocol.errors import SandboxError
from jupyter_sandbox.sandbox.host.process_lock import ProcessLock
from jupyter_sandbox.sandbox.host.python_command import module_command
from jupyter_sandbox.sandbox.host.timeouts import within
from jupyter_sandbox.sandbox.lifecycle.pool import record_wanted
from jupyter_sandbox.sandbox.lifecycle.pool_directory import PoolDirectory
from jupyter_sandbox.sandbox.lifecycle.pool_filler import WarmPool
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.settings import load_config

log = logging.getLogger(__name__)

KEEPER_LOG = "pool-keeper.log"  # in the state directory: what the detached keeper said
CHECK_SECONDS = 1.0  # how often the keeper looks whether its pool is still used
MAX_WANTED_BYTES = 64 * 1024  # a request: a runtime, an image, a few limits and a path
WANTED_NAMES = frozenset({"runtime", "image", "limits", "launch_dir"})
STOP_SECONDS = 60.0  # a drain removes each member through the engine: seconds, not minutes


class HeadlessPool(LoggingConfigurable):
    """The warm pool kept for kernels started with no server (nbconvert, papermill...)."""

    enabled = Bool(
        True,
        config=True,
        help="""Whether a Sandboxed Python kernel started with no Jupyter server (nbconvert,
        nbclient, papermill, a jupyter_client script) starts a process that keeps sandboxes
        warm for the next such kernels of the same request (folder, runtime, image, limits),
        so that they start in a claim instead of a sandbox start. Its members hold host memory
        (WarmPool.size per request kept; see the performance page) until idle_timeout.""",
    )
    idle_timeout = Float(
        600.0,
        min=1.0,
        config=True,
        help="""Seconds without a kernel claiming one of its sandboxes (or missing the pool)
        after which the headless pool removes its sandboxes and its process exits.""",
    )


def start_keeper(config: Config, state_dir: str, owner: str, wanted: dict[str, Any]) -> bool:
    """Start the owner's headless pool process unless it is off or a process (a server or
    another keeper) already keeps the owner's pool; never waits for it. ``wanted``: the
    request of the kernel starting it (runtime, image, limits, launch_dir, as
    SandboxManager.check_request takes them), whose key it keeps warm; the kernel's miss was
    not recorded, since no refiller ran then. Whether one was started."""
    if not HeadlessPool(config=config).enabled or _pool_size(config) == 0:
        return False
    pool_dir = PoolDirectory(Path(state_dir))
    if ProcessLock.is_held(pool_dir.refill_lock_path(owner)):
        return False
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    with open(os.path.join(state_dir, KEEPER_LOG), "ab") as log_file:
        keeper = subprocess.Popen(
            module_command("jupyter_sandbox.sandbox.lifecycle.pool_keeper", owner),
            stdin=subprocess.PIPE,  # the request, not on a command line others can read
            stdout=log_file,
            stderr=log_file,
            start_new_session=True,  # outlives the kernel, and its group's signals
            cwd="/",  # not the notebook's folder, which may go before it does
        )
    assert keeper.stdin is not None
    with contextlib.suppress(BrokenPipeError):  # it found the pool kept already, and left
        keeper.stdin.write(json.dumps(wanted).encode())
    with contextlib.suppress(BrokenPipeError):
        keeper.stdin.close()
    return True


def stop_keeper(state_dir: Path, owner: str, timeout: float = STOP_SECONDS) -> bool:
    """Ask the process keeping ``owner``'s pool in ``state_dir`` to drain it and exit, and wait
    until it has let go of the pool (at most ``timeout`` seconds); whether none holds it now.
    For a state directory no server uses (tests, benchmarks): the holder is signalled
    whoever it is."""
    lock = ProcessLock(PoolDirectory(state_dir).refill_lock_path(owner))
    note = lock.note_of_holder()
    if ProcessLock.is_held(lock.path) and note.isdigit():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(note), signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while ProcessLock.is_held(lock.path) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not ProcessLock.is_held(lock.path)


async def keep(owner: str, config: Config, wanted: dict[str, Any] | None) -> int:
    """Keep ``owner``'s pool warm, for ``wanted`` (a kernel's request, see start_keeper) and
    the keys kernels miss from now on, until it has been idle for idle_timeout; 0 when
    done."""
    settings = HeadlessPool(config=config)
    manager = SandboxManager.from_config(config)
    pool = WarmPool(manager, owner, keep_default=False, purpose="warm-pool", config=config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        if not await pool.start():
            log.info("the warm pool of %s is kept by another process", owner)
            return 0
        if wanted is not None:
            try:
                record_wanted(manager.settings.state_path, manager.check_request(owner, **wanted))
            except (SandboxError, TypeError) as exc:
                log.warning("not keeping the starting kernel's request warm: %s", exc)
        seen = _pool_files(pool)
        last_used = time.monotonic()
        state_path = manager.settings.state_path
        while not stop.is_set() and time.monotonic() - last_used < settings.idle_timeout:
            if not state_path.is_dir():  # removed (with its sandboxes): nothing left to keep
                return 0
            with contextlib.suppress(asyncio.TimeoutError):
                await within(stop.wait(), CHECK_SECONDS)
            now = _pool_files(pool)
            if now != seen:  # a claim took a ticket, or a miss wanted a key
                seen, last_used = now, time.monotonic()
        removed = await pool.drain()
        log.info("headless warm pool of %s: idle; removed %d sandbox(es)", owner, len(removed))
        return 0
    finally:
        await manager.close()


def _pool_size(config: Config) -> int:
    """WarmPool.size as ``config`` sets it (the pool object itself needs a manager)."""
    section = config.WarmPool
    return int(section.size) if "size" in section else int(WarmPool.size.default_value)


def _pool_files(pool: WarmPool) -> tuple[frozenset[str], frozenset[str]]:
    """The pool's tickets and wanted keys now: a change means a kernel used the pool."""
    tickets = frozenset(
        f"{key}/{member}" for key, members in pool.members().items() for member in members
    )
    wanted = frozenset(name for name, _record in pool.directory.wanted())
    return tickets, wanted


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s pool-keeper %(levelname)s %(message)s"
    )
    return asyncio.run(keep(argv[1], load_config(), read_wanted(sys.stdin.buffer)))


def read_wanted(stream: BinaryIO) -> dict[str, Any] | None:
    """The starting kernel's request, sent on standard input: a JSON object of the names
    check_request takes, at most MAX_WANTED_BYTES; None for anything else."""
    data = stream.read(MAX_WANTED_BYTES + 1)
    if len(data) > MAX_WANTED_BYTES:
        return None
    try:
        wanted = json.loads(data)
    except ValueError:
        return None
    if not isinstance(wanted, dict) or not set(wanted) <= WANTED_NAMES:
        return None
    return wanted


if __name__ == "__main__":
    sys.exit(main(sys.argv))
