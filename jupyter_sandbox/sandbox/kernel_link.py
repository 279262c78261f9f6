"""The in-sandbox kernel's connection and the wait for it to answer.

The kernel inside the sandbox gets its own fresh key and ``ipc://`` sockets in the sandbox's
host directory; the host reaches it with plain ``jupyter_client``. Readiness is a
``kernel_info_reply`` on shell plus one message on iopub (the kernel's status), so a client that
connects after :func:`wait_until_ready` returns misses nothing. There is no fixed sleep: ZMQ
reconnects to the socket path until the kernel binds it, and each wait is on a message.
"""

from __future__ import annotations

import queue
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

import zmq
import zmq.asyncio
from jupyter_client.asynchronous.client import AsyncKernelClient

from .errors import SandboxStartError, SandboxStartTimeoutError

PORTS = {"shell_port": 1, "iopub_port": 2, "stdin_port": 3, "control_port": 4, "hb_port": 5}
# A bridged kernel (see bridged_connection_info) listens on these TCP ports plus the offset.
BRIDGE_PORT_OFFSET = 50000
# How often a not-yet-connected ipc:// socket retries; also the poll of the container's state.
RECONNECT_MS = 20
POLL_SECONDS = 0.25


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
    """Return the kernel's ``kernel_info_reply`` content once shell and iopub both work.

    ``still_running`` is awaited between attempts; it returns None while the sandbox lives, or
    the reason it does not (e.g. "exited with code 1: <log tail>"), which fails the wait at once.
    """
    context = zmq.asyncio.Context()
    context.setsockopt(zmq.RECONNECT_IVL, RECONNECT_MS)
    client = AsyncKernelClient(context=context)
    client.load_connection_info(connection_info)  # type: ignore[arg-type]
    client.start_channels(shell=True, iopub=True, stdin=False, hb=False, control=False)
    deadline = time.monotonic() + timeout
    try:
        reply = await _first_reply(client, deadline, still_running)
        # The reply proves shell works; iopub may still be joining (ZMQ's slow-joiner): ask
        # again until a status message arrives on it.
        while not await _iopub_message(client, deadline):
            await _check(deadline, still_running, timeout)
            client.kernel_info()
        return reply
    finally:
        client.stop_channels()
        context.destroy(linger=0)


async def _first_reply(
    client: AsyncKernelClient,
    deadline: float,
    still_running: Callable[[], Awaitable[str | None]],
) -> dict[str, Any]:
    client.kernel_info()
    while True:
        try:
            msg = await client.get_shell_msg(timeout=_wait(deadline))
        except queue.Empty:  # nothing yet
            pass
        else:
            if msg["msg_type"] == "kernel_info_reply":
                return dict(msg["content"])
        await _check(deadline, still_running, deadline - time.monotonic())


async def _iopub_message(client: AsyncKernelClient, deadline: float) -> bool:
    try:
        await client.get_iopub_msg(timeout=_wait(deadline))
    except queue.Empty:
        return False
    return True


def _wait(deadline: float) -> float:
    """Seconds to wait for the next message: a poll's worth, but never past ``deadline`` (a
    reply after it must not count, however short the start timeout)."""
    return max(0.0, min(POLL_SECONDS, deadline - time.monotonic()))


async def _check(
    deadline: float, still_running: Callable[[], Awaitable[str | None]], timeout: float
) -> None:
    reason = await still_running()
    if reason is not None:
        raise SandboxStartError(f"the sandbox's kernel did not start: {reason}")
    if time.monotonic() > deadline:
        raise SandboxStartTimeoutError(
            "the sandbox's kernel did not answer kernel_info in time "
            "(SandboxSettings.start_timeout); the sandbox was removed"
        )


async def shut_kernel_down(
    connection_info: dict[str, Any], *, restart: bool, timeout: float = 10.0
) -> None:
    """Ask the kernel behind ``connection_info`` to shut down, as a frontend would.

    With ``restart`` the sandbox's supervisor (told first, see SandboxDirectory.request_restart)
    starts a fresh interpreter afterwards. A kernel that does not reply within ``timeout`` s is
    left to the supervisor, which restarts it when it exits anyway.
    """
    context = zmq.asyncio.Context()
    client = AsyncKernelClient(context=context)
    client.load_connection_info(connection_info)  # type: ignore[arg-type]
    client.start_channels(shell=False, iopub=False, stdin=False, hb=False, control=True)
    try:
        msg = client.session.msg("shutdown_request", {"restart": restart})
        client.control_channel.send(msg)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                reply = await client.control_channel.get_msg(timeout=_wait(deadline))
            except queue.Empty:
                continue
            if reply["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
                return
    finally:
        client.stop_channels()
        context.destroy(linger=0)
