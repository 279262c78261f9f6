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

A claimed member leaves the proxy kernel's own imports as the cost of a start above a local
python3 kernel's (docs/explanation/performance.md). So the keeper also runs a kernel zygote (kernel/zygote.py), as a server
does, at a fixed place in the state directory (zygote_process.headless_socket), where the
kernelspec's launcher looks when no server named its own zygote; a launcher that finds none
there, or a stale socket, starts the kernel the ordinary way. One zygote per state directory
(its lock: the keepers of several owners of one user share it, since a forked kernel reads its
owner and settings from its own environment, as an exec'd one does); it ends with the keeper,
and by itself if the keeper is killed (``--parent``).
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
from jupyter_sandbox.sandbox.host.zygote_process import (
    MAX_SOCKET_PATH,
    headless_socket,
    start_zygote,
    stop_zygote,
)
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
    fast_kernel_start = Bool(
        True,
        config=True,
        help="""Whether the headless pool's process also runs a kernel zygote (one more host
        process, for as long as the pool lives; its memory is on the performance page) from
        which kernels started with no server are forked with the proxy kernel's imports done.
        Found only in the default SandboxSettings.state_dir (the kernel's launcher reads no
        configuration).""",
    )


class HeadlessZygote:
    """The keeper's zygote at :func:`headless_socket`: started by :meth:`keep` when no other
    keeper's runs (the lock beside the socket says whose does), stopped by :meth:`stop`."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.path = headless_socket(state_dir)
        self.lock = ProcessLock(self.path.with_name("headless.lock"))
        self.process: subprocess.Popen[bytes] | None = None
        self.given_up = False

    def keep(self) -> None:
        """Start the zygote if none runs for this state directory; called on every check, so
        that a keeper takes over when the one whose zygote served them ends first. One that
        exited on its own is not started again (it would fail the same way): kernels start
        without it, as they do when it cannot start."""
        if self.given_up:
            return
        if self.process is not None:
            if self.process.poll() is not None:
                log.warning(
                    "the headless zygote exited (code %s); kernels start without it",
                    self.process.returncode,
                )
                self._give_up()
            return
        if len(str(self.path)) > MAX_SOCKET_PATH:
            log.warning("no headless zygote: %s is too long for a Unix socket", self.path)
            self._give_up()
            return
        if not self.state_dir.is_dir():  # removed: taking the lock would make it again
            return
        if not self.lock.try_acquire(note=str(os.getpid())):
            return
        try:  # logs to this keeper's log, as the kernels it forks do until they take theirs
            self.process = start_zygote(self.path, os.getpid())
        except OSError as exc:
            log.warning("no headless zygote: %s", exc)
            self._give_up()
            return
        log.info("headless zygote pid %s at %s", self.process.pid, self.path)

    def stop(self) -> None:
        """Stop the zygote and let go of its lock; kernels it forked live on."""
        process, self.process = self.process, None
        if process is not None:
            stop_zygote(process, self.path)
        self.lock.release(remove=True)

    def _give_up(self) -> None:
        self.given_up = True
        self.stop()


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
    zygote = HeadlessZygote(manager.settings.state_path) if settings.fast_kernel_start else None
    try:
        if not await pool.start():
            log.info("the warm pool of %s is kept by another process", owner)
            return 0
        if zygote is not None:
            zygote.keep()
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
            if zygote is not None:
                zygote.keep()
        if zygote is not None:  # first: no kernel may be forked for a pool about to go
            zygote.stop()
        removed = await pool.drain()
        log.info("headless warm pool of %s: idle; removed %d sandbox(es)", owner, len(removed))
        return 0
    finally:
        if zygote is not None:  # also when the keep ended early or failed
            zygote.stop()
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
