"""Pinned kernel sockets (no engine): the host reaches the socket it checked, never a link's
target, and refuses an entry that is not a socket."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from jupyter_sandbox.protocol.errors import SocketReplacedError
from jupyter_sandbox.sandbox.kernel_link.socket_pin import (
    PinnedKernelClient,
    PinnedSockets,
    pin_sockets,
    socket_path,
)


@pytest.fixture
def kernel_dir(tmp_path: Path) -> Iterator[tuple[dict[str, Any], zmq.Socket[bytes]]]:
    """A stand-in kernel's shell (REP) bound at an ipc:// connection file's path."""
    info = {"transport": "ipc", "ip": str(tmp_path / "kernel"), "shell_port": 1, "iopub_port": 2}
    context = zmq.Context()
    shell = context.socket(zmq.REP)
    shell.bind(f"ipc://{socket_path(info, 'shell')}")
    try:
        yield info, shell
    finally:
        context.destroy(linger=0)


@pytest.fixture
def decoy(tmp_path: Path) -> Iterator[tuple[str, socket.socket]]:
    """A host Unix socket listening where a hostile sandbox would point its links."""
    path = str(tmp_path / "decoy.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen()
    listener.setblocking(False)
    try:
        yield path, listener
    finally:
        listener.close()


def contacted(listener: socket.socket) -> bool:
    try:
        listener.accept()[0].close()
    except BlockingIOError:
        return False
    return True


def test_a_pinned_socket_is_reached_even_after_its_path_is_swapped_for_a_link(
    kernel_dir: tuple[dict[str, Any], zmq.Socket[bytes]], decoy: tuple[str, socket.socket]
) -> None:
    info, shell = kernel_dir
    pins = pin_sockets(info, ("shell",))
    assert pins is not None
    path = socket_path(info, "shell")
    os.rename(path, path + ".moved")  # the sandbox renames its socket and plants a link
    os.symlink(decoy[0], path)
    client = shell.context.socket(zmq.REQ)
    client.connect(pins.endpoint("shell"))  # ZMQ connects (and would reconnect) by this path
    client.send(b"ping")
    assert shell.poll(5000)
    assert shell.recv() == b"ping"
    client.close(linger=0)
    pins.close()
    assert not contacted(decoy[1])


@pytest.mark.parametrize(
    ("plant", "kind"),
    [
        (lambda path, target: os.symlink(target, path), "symlink"),
        (lambda path, target: Path(path).write_text("x"), "regular file"),
        (lambda path, target: os.mkdir(path), "directory"),
        (lambda path, target: os.mkfifo(path), "special file"),
    ],
)
def test_an_entry_that_is_not_a_socket_is_refused_naming_it(
    kernel_dir: tuple[dict[str, Any], zmq.Socket[bytes]],
    decoy: tuple[str, socket.socket],
    plant: Any,
    kind: str,
) -> None:
    info, _ = kernel_dir
    path = socket_path(info, "iopub")
    plant(path, decoy[0])
    open_before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(SocketReplacedError, match=f"{path} is a {kind}, not a socket"):
        pin_sockets(info, ("shell", "iopub"))
    assert len(os.listdir("/proc/self/fd")) == open_before  # the shell's pin was let go
    assert not contacted(decoy[1])


def test_nothing_is_pinned_until_every_socket_is_bound(
    kernel_dir: tuple[dict[str, Any], zmq.Socket[bytes]],
) -> None:
    info, _ = kernel_dir
    open_before = len(os.listdir("/proc/self/fd"))
    assert pin_sockets(info, ("shell", "iopub")) is None  # iopub is not bound
    assert len(os.listdir("/proc/self/fd")) == open_before


def test_only_ipc_connections_are_pinned() -> None:
    with pytest.raises(ValueError, match="only ipc://"):
        pin_sockets({"transport": "tcp", "ip": "127.0.0.1", "shell_port": 1}, ("shell",))


def test_the_kernel_client_connects_to_the_pins(
    kernel_dir: tuple[dict[str, Any], zmq.Socket[bytes]],
) -> None:
    info, _ = kernel_dir
    pins = pin_sockets(info, ("shell",))
    assert isinstance(pins, PinnedSockets)
    with pins:
        client = PinnedKernelClient()
        client.load_connection_info(info)  # type: ignore[arg-type]
        client.endpoints = pins
        assert client._make_url("shell") == pins.endpoint("shell")
        assert pins.endpoint("shell").startswith("ipc:///proc/self/fd/")
