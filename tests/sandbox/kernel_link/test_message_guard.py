"""The guard in front of the server's kernel sockets (no engine): real libzmq on both sides, the
stand-in kernel in a process of its own, as a sandbox's kernel is."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import zmq
import zmq.asyncio

from jupyter_sandbox.sandbox.kernel_link.message_guard import MessageGuard
from jupyter_sandbox.sandbox.kernel_link.socket_pin import PinnedSockets, pin_socket
from tests.memory_growth import peak_growth

MiB = 2**20
# A stand-in kernel: a ROUTER bound at argv[1] that answers each request by the message it
# names: "parts N SIZE" (N parts of SIZE bytes each), or "flood N SIZE" (N one-part messages).
KERNEL = textwrap.dedent(
    """
    import sys, zmq
    socket = zmq.Context().socket(zmq.ROUTER)
    socket.setsockopt(zmq.SNDHWM, 0)  # nothing dropped here: what the host takes is measured
    socket.bind(sys.argv[1])
    print("bound", flush=True)
    while True:
        ident, request = socket.recv_multipart()
        kind, count, size = request.split()
        part = b"x" * int(size)
        if kind == b"parts":
            socket.send_multipart([ident] + [part] * int(count))
        else:
            for _ in range(int(count)):
                socket.send_multipart([ident, part])
        socket.send_multipart([ident, b"done"])
    """
)


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[PinnedSockets]:
    path = tmp_path / "kernel-1"
    process = subprocess.Popen(
        [sys.executable, "-c", KERNEL, f"ipc://{path}"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == "bound\n"
        fd = pin_socket(str(path))
        assert fd is not None
        pins = PinnedSockets()
        pins.add("shell", fd)
        with pins:
            yield pins
    finally:
        process.kill()
        process.wait()


@pytest.fixture
async def client(kernel: PinnedSockets) -> AsyncIterator[zmq.asyncio.Socket]:
    """A DEALER as the server's clients make them (RCVHWM 1), through a guard of 4 MiB."""
    guard = MessageGuard(kernel, ["shell"], max_message_bytes=4 * MiB)
    context = zmq.asyncio.Context()
    context.setsockopt(zmq.RCVHWM, 1)
    context.setsockopt(zmq.RECONNECT_IVL, 20)
    socket = context.socket(zmq.DEALER)
    socket.connect(guard.endpoint("shell"))
    try:
        yield socket
    finally:
        context.destroy(linger=0)
        guard.close()


async def ask(socket: zmq.asyncio.Socket, request: bytes, timeout: float = 10) -> list[bytes]:
    """The kernel's answer to ``request``, and its "done" after it."""
    await socket.send(request)
    answer = await asyncio.wait_for(socket.recv_multipart(), timeout)
    assert await asyncio.wait_for(socket.recv_multipart(), timeout) == [b"done"]
    return answer


async def test_messages_within_the_bound_pass_whole(client: zmq.asyncio.Socket) -> None:
    assert await ask(client, b"parts 3 1000000") == [b"x" * 1000000] * 3
    assert await ask(client, b"parts 1 0") == [b""]
    assert await ask(client, b"parts 4000 100") == [b"x" * 100] * 4000


async def test_a_message_of_many_small_parts_is_never_held(
    client: zmq.asyncio.Socket, caplog: pytest.LogCaptureFixture
) -> None:
    with peak_growth() as grown:
        await client.send(b"parts 200000 1000")  # 200 MB in 200,000 parts
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(client.recv_multipart(), 3)
    assert grown() < 32 * MiB, grown()
    assert "a kernel message of more than 4194304 bytes" in caplog.text
    # The connection was cut before the message was whole; the client connected again.
    assert await ask(client, b"parts 2 10") == [b"x" * 10] * 2


async def test_a_kernel_sending_faster_than_the_client_reads_keeps_its_backlog(
    client: zmq.asyncio.Socket,
) -> None:
    with peak_growth() as grown:
        await client.send(b"flood 100 1000000")  # 100 MB, one message after the other
        await asyncio.sleep(3)  # not read meanwhile
    assert grown() < 32 * MiB, grown()
    for _ in range(100):
        assert await asyncio.wait_for(client.recv_multipart(), 10) == [b"x" * 1000000]
    assert await asyncio.wait_for(client.recv_multipart(), 10) == [b"done"]


async def test_another_process_is_refused(
    client: zmq.asyncio.Socket, kernel: PinnedSockets, caplog: pytest.LogCaptureFixture
) -> None:
    endpoint = client.getsockopt_string(zmq.LAST_ENDPOINT)
    caplog.set_level(logging.WARNING)
    intruder = textwrap.dedent(
        f"""
        import socket
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect("\\0" + {endpoint.removeprefix("ipc://@")!r})
        s.settimeout(10)
        try:  # the guard may close it before the greeting is even sent
            s.sendall(b"\\xff" + bytes(8) + b"\\x7f")
            print("closed" if s.recv(100) == b"" else "answered")
        except (BrokenPipeError, ConnectionResetError):
            print("closed")
        """
    )
    for _ in range(2):
        found = await asyncio.create_subprocess_exec(
            sys.executable, "-c", intruder, stdout=asyncio.subprocess.PIPE
        )
        out, _ = await found.communicate()
        assert out == b"closed\n"  # at once, with nothing of the kernel's greeting
    refusals = [r for r in caplog.records if "refused a connection to a kernel's guard" in r.msg]
    assert [r.levelno for r in refusals] == [logging.WARNING]  # said once, not for every call
    assert await ask(client, b"parts 1 5") == [b"xxxxx"]  # the client's own still works
