"""Connecting to the sandbox kernel's sockets without letting the sandbox redirect the host.

The kernel's ``ipc://`` sockets live in the sandbox's ``io/`` directory, which code in the
sandbox can write: it can replace ``kernel-1`` by a symlink to any path on the host, say
``/var/run/docker.sock`` or another user's kernel. A plain ``connect()`` follows that link, so
the host would open a connection wherever the sandbox points (and keep reconnecting there).

Linux has no ``O_NOFOLLOW`` for ``connect()``. So each socket is first opened with
``O_PATH | O_NOFOLLOW``, which yields the directory entry itself (a symlink stays a symlink),
checked to be a socket, and then reached through ``/proc/self/fd/<fd>``: that magic link
resolves to exactly the inode that was opened, whatever the sandbox renames or replaces
afterwards. The descriptors stay open as long as anything may connect (ZMQ reconnects by path),
and are closed with :meth:`PinnedSockets.close`.

Used by every host-side connection the project makes to a kernel: the proxy kernel's relay, the
readiness wait and the restart's shutdown request; and, through :func:`connect_pinned`, to the
network forwarder's and the port opener's sockets. ``Sandbox.connection_info`` itself keeps the
plain paths, for clients that cannot pin (they should connect through the proxy kernel).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
import stat
from collections.abc import Iterable
from typing import Any, Protocol

from jupyter_client.asynchronous.client import AsyncKernelClient

from jupyter_sandbox.protocol.errors import SocketReplacedError

CHANNELS = ("shell", "iopub", "stdin", "control", "hb")
_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


def socket_path(info: dict[str, Any], channel: str) -> str:
    """Where the kernel of an ``ipc://`` connection file binds ``channel`` (as jupyter_client
    and ipykernel name it: ``<ip>-<port>``)."""
    return f"{info['ip']}-{info[f'{channel}_port']}"


def pin_socket(path: str) -> int | None:
    """An ``O_PATH`` descriptor of the socket at ``path`` (reach it at :func:`pinned_path`);
    None if nothing is there yet. Raises SocketReplacedError, naming the entry, when it is
    anything but a socket."""
    try:
        fd = os.open(path, _FLAGS)
    except FileNotFoundError:
        return None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISSOCK(mode):
        os.close(fd)
        raise SocketReplacedError.at(path, _kind(mode))
    return fd


def pinned_path(fd: int) -> str:
    """The path that reaches exactly the socket pinned as ``fd``, in this process only."""
    return f"/proc/self/fd/{fd}"


async def connect_pinned(path: str) -> socket.socket:
    """A non-blocking Unix connection to the socket at ``path`` itself, never to where a link
    planted in its place points (for the network tunnels and the port opener, whose sockets lie
    in a directory the sandbox writes). FileNotFoundError while nothing is there;
    SocketReplacedError, naming the entry, when it is not a socket; the connect's OSError."""
    pinned = pin_socket(path)
    if pinned is None:
        raise FileNotFoundError(errno.ENOENT, "no socket here yet", path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        try:
            await asyncio.get_running_loop().sock_connect(sock, pinned_path(pinned))
        finally:
            os.close(pinned)  # the connection, once made, does not need the path
    except BaseException:
        sock.close()
        raise
    return sock


def _kind(mode: int) -> str:
    kinds = {stat.S_IFLNK: "symlink", stat.S_IFDIR: "directory", stat.S_IFREG: "regular file"}
    return kinds.get(stat.S_IFMT(mode), "special file")


class PinnedSockets:
    """A kernel's sockets, pinned, and the ZMQ endpoints that reach exactly them; the
    endpoints work in this process only, until :meth:`close`."""

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}

    def add(self, channel: str, fd: int) -> None:
        self._fds[channel] = fd

    def path(self, channel: str) -> str:
        """The path that reaches exactly ``channel``'s socket, in this process."""
        return pinned_path(self._fds[channel])

    def endpoint(self, channel: str) -> str:
        return f"ipc://{self.path(channel)}"

    def close(self) -> None:
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = {}

    def __enter__(self) -> PinnedSockets:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def pin_sockets(info: dict[str, Any], channels: Iterable[str] = CHANNELS) -> PinnedSockets | None:
    """Pin the kernel's sockets for ``channels``; None while any of them is not bound yet.

    Raises SocketReplacedError, naming the entry, when one is anything but a socket.
    """
    if info.get("transport") != "ipc":
        raise ValueError(f"only ipc:// kernel sockets can be pinned, not {info.get('transport')}")
    pins = PinnedSockets()
    try:
        for channel in channels:
            fd = pin_socket(socket_path(info, channel))
            if fd is None:
                pins.close()
                return None
            pins.add(channel, fd)
    except BaseException:
        pins.close()
        raise
    return pins


class Endpoints(Protocol):
    """Where a client's ZMQ socket of each channel connects: the pins themselves
    (:class:`PinnedSockets`), or a guard in front of them (message_guard.py)."""

    def endpoint(self, channel: str) -> str: ...


class PinnedKernelClient(AsyncKernelClient):
    """jupyter_client's client, connecting its channels to pinned sockets.

    ``_make_url`` is where every ``KernelClient`` turns its connection info into an endpoint
    (jupyter_client 7 and 8); ``endpoints`` replace the paths the sandbox could have redirected.
    """

    endpoints: Endpoints | None = None

    def _make_url(self, channel: str) -> str:
        assert self.endpoints is not None, "set endpoints before starting channels"
        return self.endpoints.endpoint(channel)
