"""The in-sandbox kernel's connection and the wait for it to answer.

The kernel inside the sandbox gets its own fresh key and ``ipc://`` sockets in the sandbox's
host directory; the host reaches it with ``jupyter_client``, through sockets pinned so that the
sandbox cannot redirect it (socket_pin.py). Readiness is a ``kernel_info_reply`` on control plus
one message on iopub (the kernel's status), so a client that connects after
:func:`wait_until_ready` returns misses nothing. Control, not shell: ipykernel answers it even
while a cell runs on shell, so a context whose kernel is still busy with a cell (its proxy
crashed, Jupyter restarted) is found again at once, and that cell can be interrupted. There is
no fixed sleep: the wait looks for the socket files as often as ZMQ would retry a connection,
and each wait after that is on a message.

A ready client is a :class:`HeldClient`: :func:`ready_client` lets it go on exit (the wait for
a kernel to start), :func:`open_ready_client` hands it over to be kept (code runs' pool,
clients.py), and it can tell whether the kernel's socket files are still the ones pinned.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import zmq
import zmq.asyncio

from jupyter_sandbox.protocol.errors import SandboxStartError, SandboxStartTimeoutError
from jupyter_sandbox.sandbox.kernel_link.execution import received
from jupyter_sandbox.sandbox.kernel_link.kernel_messages import StrictSession
from jupyter_sandbox.sandbox.kernel_link.message_guard import MessageGuard
from jupyter_sandbox.sandbox.kernel_link.socket_pin import (
    CHANNELS,
    PinnedKernelClient,
    PinnedSockets,
    pin_sockets,
    socket_path,
)

log = logging.getLogger(__name__)

PORTS = {"shell_port": 1, "iopub_port": 2, "stdin_port": 3, "control_port": 4, "hb_port": 5}
# A bridged kernel (see bridged_connection_info) listens on these TCP ports plus the offset.
BRIDGE_PORT_OFFSET = 50000
# How often a not-yet-connected ipc:// socket retries, and the wait looks for the socket files.
RECONNECT_MS = 20
# The most a message from a sandbox's kernel may cost these clients, in bytes (its parts, and
# PART_COST each: zmtp_frames.py): the guard in front of their sockets cuts the connection of a
# kernel that sends more before it is held (message_guard.py), and the run then fails as on a
# kernel that went silent. These clients live in the server, which all owners share; the proxy
# kernels bound their own processes (kernel/memory_bound.py). Four times the most output a code
# run's result holds (operations/code_runs.py MAX_OUTPUT).
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
POLL_SECONDS = 0.25  # how often the container's state is checked while waiting


def new_connection_info(socket_prefix: str) -> dict[str, Any]:
    """A connection file for a kernel whose sockets live at ``socket_prefix-<n>``."""
    return {
        "transport": "ipc",
        "ip": socket_prefix,
        **PORTS,
        "key": secrets.token_hex(32),
        "signature_scheme": "hmac-sha256",
        "kernel_name": "python3",
    }


def bridged_connection_info(info: dict[str, Any]) -> dict[str, Any]:
    """The sandbox's copy of ``info`` for a kernel behind the bridge (memory snapshots).

    The kernel listens on loopback TCP inside the sandbox; the supervisor's bridge
    (images/python/sandbox_bridge.py) listens at the ``ipc://`` paths the host connects to and
    copies bytes to port ``n + bridge_port_offset``, so the host's side does not change.
    """
    ports = {name: info[name] + BRIDGE_PORT_OFFSET for name in PORTS}
    return {
        **info,
        **ports,
        "transport": "tcp",
        "ip": "127.0.0.1",
        "bridge_port_offset": BRIDGE_PORT_OFFSET,
    }


def with_socket_prefix(info: dict[str, Any], socket_prefix: str) -> dict[str, Any]:
    """The same connection seen from elsewhere (host vs container path of the sockets)."""
    return {**info, "ip": socket_prefix}


async def wait_until_ready(
    connection_info: dict[str, Any],
    *,
    timeout: float,
    still_running: Callable[[], Awaitable[str | None]],
) -> dict[str, Any]:
    """Return the kernel's ``kernel_info_reply`` content once control and iopub both work.

    ``still_running`` is awaited between attempts; it returns None while the sandbox lives, or
    the reason it does not (e.g. "exited with code 1: <log tail>"), which fails the wait at once.
    """
    async with ready_client(
        connection_info, timeout=timeout, still_running=still_running, shell=False
    ) as (_, reply):
        return reply


@contextlib.asynccontextmanager
async def ready_client(
    connection_info: dict[str, Any],
    *,
    timeout: float,
    still_running: Callable[[], Awaitable[str | None]],
    shell: bool = True,
) -> AsyncIterator[tuple[PinnedKernelClient, dict[str, Any]]]:
    """A client of the kernel behind ``connection_info`` (control, iopub and, if asked,
    shell), and the kernel's ``kernel_info_reply`` content, once the kernel answers and iopub
    has joined: nothing the kernel publishes after this is missed. Let go on exit."""
    held, reply = await open_ready_client(
        connection_info, timeout=timeout, still_running=still_running, shell=shell
    )
    try:
        yield held.client, reply
    finally:
        held.close()


async def open_ready_client(
    connection_info: dict[str, Any],
    *,
    timeout: float,
    still_running: Callable[[], Awaitable[str | None]],
    shell: bool = True,
) -> tuple[HeldClient, dict[str, Any]]:
    """What :func:`ready_client` yields, held until the caller closes it: the pool of code
    runs' clients (clients.py) keeps it for the next run. Closed here if it fails."""
    deadline = time.monotonic() + timeout
    pins = await _pinned_once_bound(connection_info, deadline, still_running)
    held = HeldClient(connection_info, pins, iopub=True, shell=shell)
    try:
        reply = await _first_reply(held.client, deadline, still_running)
        # The reply proves the kernel runs; iopub may still be joining (ZMQ's slow joiner): ask
        # again until a status message (ipykernel publishes one per control request) arrives.
        while not await _iopub_message(held.client, deadline):
            await _check(deadline, still_running)
            _ask_kernel_info(held.client)
    except BaseException:
        held.close()
        raise
    return held, reply


class HeldClient:
    """A client with its control channel (and iopub and shell, if asked) started on ``pins``,
    and all it holds: its ZMQ context (an I/O thread), its sockets and the pinned descriptors.

    The client's sockets reach the kernel through a :class:`MessageGuard`, which bounds each
    message the kernel sends, and take one message at most ahead of their reader (RCVHWM): a
    kernel sending faster than the client reads fills its own buffers.

    :meth:`still_bound` says whether the kernel's socket files are still the ones pinned: a
    kernel restarted in place, or a sandbox restored from a snapshot, binds new ones, and a
    client kept from before (clients.py) would talk to no kernel, or to the old one.
    """

    def __init__(
        self, connection_info: dict[str, Any], pins: PinnedSockets, *, iopub: bool, shell: bool
    ) -> None:
        self.connection_info, self._pins, self._open = connection_info, pins, True
        self.context = zmq.asyncio.Context()
        self._guard: MessageGuard | None = None
        try:
            # The inode each pin reaches, to compare with what the paths name later.
            self._bound = {channel: _pinned_identity(pins, channel) for channel in CHANNELS}
            self._guard = MessageGuard(pins, CHANNELS, max_message_bytes=MAX_MESSAGE_BYTES)
            self.context.setsockopt(zmq.RECONNECT_IVL, RECONNECT_MS)
            self.context.setsockopt(zmq.RCVHWM, 1)
            # Reads what the kernel sends strictly and in bounded steps (kernel_messages.py).
            self.client = PinnedKernelClient(context=self.context, session=StrictSession())
            self.client.endpoints = self._guard
            self.client.load_connection_info(connection_info)  # type: ignore[arg-type]
            self.client.start_channels(
                shell=shell, iopub=iopub, stdin=False, hb=False, control=True
            )
        except BaseException:
            self.context.destroy(linger=0)
            if self._guard is not None:
                self._guard.close()
            pins.close()
            self._open = False
            raise

    def still_bound(self) -> bool:
        """Whether every socket path still names the socket pinned (a few lstat calls)."""
        return all(
            _identity(socket_path(self.connection_info, channel)) == bound
            for channel, bound in self._bound.items()
        )

    def close(self) -> None:
        """Stop the channels, destroy the context, close the pins; again is a no-op."""
        if not self._open:
            return
        self._open = False
        try:
            self.client.stop_channels()
        finally:
            try:
                self.context.destroy(linger=0)
            finally:
                if self._guard is not None:
                    self._guard.close()
                self._pins.close()


def _identity(path: str) -> tuple[int, int] | None:
    """The directory entry's device and inode, not following a link; None if it is gone."""
    try:
        found = os.lstat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def _pinned_identity(pins: PinnedSockets, channel: str) -> tuple[int, int]:
    """The device and inode of the socket ``channel``'s pin reaches (its /proc/self/fd link)."""
    found = os.stat(pins.path(channel))
    return found.st_dev, found.st_ino


async def _pinned_once_bound(
    connection_info: dict[str, Any],
    deadline: float,
    still_running: Callable[[], Awaitable[str | None]],
) -> PinnedSockets:
    """The kernel's sockets, pinned as soon as the kernel has bound them all (all: the client's
    stop_channels connects every channel it did not start, only to stop it)."""
    checked = time.monotonic()
    while (pins := pin_sockets(connection_info)) is None:
        now = time.monotonic()
        if now - checked >= POLL_SECONDS or now > deadline:
            await _check(deadline, still_running)
            checked = now
        await asyncio.sleep(RECONNECT_MS / 1000)
    return pins


async def _first_reply(
    client: PinnedKernelClient,
    deadline: float,
    still_running: Callable[[], Awaitable[str | None]],
) -> dict[str, Any]:
    _ask_kernel_info(client)
    while True:
        try:
            msg = await client.control_channel.get_msg(timeout=_wait(deadline))
        except queue.Empty:  # nothing yet
            pass
        else:
            if msg["msg_type"] == "kernel_info_reply":
                return dict(msg["content"])
        await _check(deadline, still_running)


def _ask_kernel_info(client: PinnedKernelClient) -> None:
    client.control_channel.send(client.session.msg("kernel_info_request"))


async def _iopub_message(client: PinnedKernelClient, deadline: float) -> bool:
    try:
        await client.get_iopub_msg(timeout=_wait(deadline))
    except queue.Empty:
        return False
    return True


def _wait(deadline: float) -> float:
    """Seconds to wait for the next message: a poll's worth, but never past ``deadline`` (a
    reply after it must not count, however short the start timeout)."""
    return max(0.0, min(POLL_SECONDS, deadline - time.monotonic()))


async def _check(deadline: float, still_running: Callable[[], Awaitable[str | None]]) -> None:
    reason = await still_running()
    if reason is not None:
        raise SandboxStartError(f"the sandbox's kernel did not start: {reason}")
    if time.monotonic() > deadline:
        # Not "the sandbox was removed": a new sandbox's start removes it, an attach does not.
        raise SandboxStartTimeoutError(
            "the sandbox's kernel did not answer kernel_info in time "
            "(SandboxSettings.start_timeout)"
        )


async def shut_kernel_down(
    connection_info: dict[str, Any], *, restart: bool, timeout: float = 10.0
) -> None:
    """Ask the kernel behind ``connection_info`` to shut down, as a frontend would.

    With ``restart`` the sandbox's supervisor (told first, see SandboxDirectory.request_restart)
    starts a fresh interpreter afterwards. A kernel that does not reply within ``timeout`` s is
    left to the supervisor, which restarts it when it exits anyway.
    """
    pins = pin_sockets(connection_info)
    if pins is None:
        log.debug("no kernel is bound at %s; nothing to shut down", connection_info["ip"])
        return
    held = HeldClient(connection_info, pins, iopub=False, shell=False)
    try:
        client = held.client
        msg = client.session.msg("shutdown_request", {"restart": restart})
        client.control_channel.send(msg)
        async for reply in received(client.control_channel, timeout):
            if reply["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
                return
    finally:
        held.close()
