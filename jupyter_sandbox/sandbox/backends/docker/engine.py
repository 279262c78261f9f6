"""The Docker client and the one helper every blocking engine call goes through.

docker-py is synchronous. Rather than sprinkle ``run_in_executor`` around, every call runs via
:meth:`DockerEngine.run` on a bounded executor, with a time limit and with connection failures
turned into :class:`EngineUnavailableError` carrying the command that fixes them.

There are two executors, each behind a :class:`~.fair_share.FairShare` between owners. Short
calls (inspect, list, create, start, remove: seconds at most) share one; calls that last as
long as a command does (an exec whose output is read on the worker thread: commands, file
operations, streams, directory watches, snapshots) take threads of a second, larger one
(``long=True``). A user's list of sandboxes thus never waits behind anyone's commands, and no
owner holds more than their share of either: another owner's call gets the next free thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import docker
import docker.errors
import requests.exceptions

from jupyter_sandbox.protocol.errors import (
    EngineTimeoutError,
    EngineUnavailableError,
    SandboxConflictError,
    SandboxError,
)
from jupyter_sandbox.sandbox.backends.docker.exec_gate import ExecGate
from jupyter_sandbox.sandbox.host.fair_share import FairShare, current_owner
from jupyter_sandbox.sandbox.host.timeouts import within

T = TypeVar("T")
# HTTP timeout of the streaming client (seconds): a backstop that frees a worker thread even
# when the engine never answers (seen: an exec into a sandbox that gVisor's OOM kill ended).
STREAMING_TIMEOUT = 900
log = logging.getLogger(__name__)

# Where no engine can run (a Binder host, a container without privileges) the kernel refuses
# rather than run code unisolated; the message says so, so nobody mistakes it for a glitch.
NO_FALLBACK = (
    "Sandboxed Python runs code only inside a container (gVisor or runc) and never on this host "
    "itself, so it cannot run here until an engine answers (where none can run, as on a Binder "
    "host, use a machine with Docker)."
)
BOOTSTRAP_HINT = (
    "To fix: start it with 'sudo scripts/engine-bootstrap.sh' from a jupyter-sandbox checkout (it installs "
    "docker.io and runsc on Debian/Ubuntu and starts dockerd), then check with "
    "'jupyter sandbox doctor'"
)


# The engine's words for an action its container's state forbids, where it answers 500 for it.
_STATE_REFUSAL = re.compile(r"is (not |already )?(paused|running|restarting)|is not paused", re.I)


class DockerEngine:
    """Owns one ``docker.DockerClient`` (made on first use) and two bounded thread pools, each
    shared fairly between owners: ``max_workers`` threads for short calls, at most
    ``max_workers_per_owner`` of them for one owner; ``max_long`` for long ones (``long=True``),
    at most ``max_long_per_owner`` for one owner."""

    def __init__(
        self,
        *,
        timeout: float = 30.0,
        max_workers: int = 16,
        max_workers_per_owner: int = 8,
        max_long: int = 128,
        max_long_per_owner: int = 32,
        base_url: str | None = None,
    ) -> None:
        self.timeout = timeout
        self._base_url = base_url
        self._client: docker.DockerClient | None = None
        self._streaming_client: docker.DockerClient | None = None
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="docker")
        self._share = FairShare(max_workers, max_workers_per_owner)
        self._long_executor = ThreadPoolExecutor(
            max_workers=max_long, thread_name_prefix="docker-long"
        )
        self.long_share = FairShare(max_long, max_long_per_owner)
        # Execs that start and pauses, kept apart per container (exec_gate.py).
        self.exec_gate = ExecGate()

    @property
    def client(self) -> docker.DockerClient:
        """The client for short calls (HTTP timeout: ``timeout``); connects on first use.

        Blocking: call it from inside a function passed to :meth:`run`. Raises
        EngineUnavailableError when no engine answers.
        """
        with self._lock:
            if self._client is None:
                self._client = self._connect(self.timeout)
            return self._client

    @property
    def streaming_client(self) -> docker.DockerClient:
        """The client for calls that legitimately take long (exec, archives, builds).

        Its HTTP timeout is only a backstop (STREAMING_TIMEOUT); callers bound the call itself.
        """
        with self._lock:
            if self._streaming_client is None:
                self._streaming_client = self._connect(STREAMING_TIMEOUT)
            return self._streaming_client

    def _connect(self, timeout: float) -> docker.DockerClient:
        try:
            if self._base_url:
                return docker.DockerClient(
                    base_url=self._base_url, version="auto", timeout=int(timeout)
                )
            return docker.from_env(version="auto", timeout=int(timeout))
        except docker.errors.DockerException as exc:
            raise EngineUnavailableError(
                f"no Docker engine answers ({_short(exc)}). {NO_FALLBACK} {BOOTSTRAP_HINT}"
            ) from None

    async def run(
        self,
        what: str,
        fn: Callable[..., T],
        *args: Any,
        timeout: float | None = None,
        long: bool = False,
        **kwargs: Any,
    ) -> T:
        """Run ``fn(*args, **kwargs)`` on an executor, within ``timeout`` seconds from its
        start: the long calls' with ``long``, else the short calls'. The wait for a thread is
        not counted: it lasts only while the owner's share is taken by their own calls, each
        within its own limit, and a limit spent queueing behind them would fail the owner's
        kills of their own commands (many ended at once) for no fault of the engine's.

        ``what`` names the operation in errors and logs ("start sandbox 1a2b…"). docker-py's
        ``NotFound`` passes through untouched so that callers can decide what was not found.
        """
        call = functools.partial(_connection_timeout_marked, fn, *args, **kwargs)
        limit = self.timeout if timeout is None else timeout
        try:
            return await self._on_thread(call, long, limit)
        except asyncio.TimeoutError:
            raise EngineTimeoutError(
                f"the container engine did not finish '{what}' within {limit:g}s; it may be "
                "overloaded or stuck: see 'jupyter sandbox doctor'"
            ) from None
        except _ConnectionTimeoutError:
            raise EngineTimeoutError(
                f"the container engine stopped answering during '{what}' (its connection "
                "timed out); it may be overloaded or stuck: see 'jupyter sandbox doctor'"
            ) from None
        except docker.errors.NotFound:
            raise
        except requests.exceptions.ConnectionError as exc:
            raise EngineUnavailableError(
                f"lost the Docker engine during '{what}' ({_short(exc)}). {BOOTSTRAP_HINT}"
            ) from None
        except docker.errors.APIError as exc:
            message = f"the container engine refused '{what}': {_short(exc)}"
            # The container's state forbids it (paused, stopped): a 409 from the engine, or for
            # some actions a 500 that says so ("is not paused"). The manager checks the state
            # first (SandboxManager.in_status); this is for a change between its look and now.
            if exc.status_code == 409 or _STATE_REFUSAL.search(message):
                raise SandboxConflictError(
                    f"{message}: its state changed meanwhile; look at it (GET /api/sandboxes/"
                    "<id>) and retry what fits it"
                ) from None
            raise SandboxError(message) from None

    async def _on_thread(self, call: Callable[[], T], long: bool, limit: float) -> T:
        """``call()`` on a thread of its lane once the current owner's share has one free,
        within ``limit`` seconds once there (else asyncio.TimeoutError).

        The slot is given back when the thread is done with the call, not when its caller
        stops waiting (a call past its time limit still holds its thread): else an owner
        whose calls hang would hold threads the share thinks free.
        """
        share = self.long_share if long else self._share
        executor = self._long_executor if long else self._executor
        loop = asyncio.get_running_loop()
        owner = await share.acquire(current_owner.get())
        try:
            running = executor.submit(call)
        except BaseException:
            share.release(owner)
            raise

        def done(_: object) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
                loop.call_soon_threadsafe(share.release, owner)

        running.add_done_callback(done)
        return await within(asyncio.wrap_future(running), limit)

    def close(self) -> None:
        with self._lock:
            for client in (self._client, self._streaming_client):
                if client is not None:
                    client.close()
            self._client = self._streaming_client = None
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._long_executor.shutdown(wait=False, cancel_futures=True)


class _ConnectionTimeoutError(Exception):
    """A call's connection to the engine timed out (its client's HTTP timeout, a socket's):
    told apart from the call's own limit, since both are TimeoutError by the time they reach
    the event loop."""


def _connection_timeout_marked(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    try:
        return fn(*args, **kwargs)
    except (TimeoutError, requests.exceptions.Timeout) as exc:
        raise _ConnectionTimeoutError from exc


def _short(exc: BaseException) -> str:
    """The useful part of a docker-py / requests error, on one line."""
    if isinstance(exc, docker.errors.APIError) and exc.explanation:
        text = str(exc.explanation)
    else:
        text = str(exc)
    return " ".join(text.split())[:400]
