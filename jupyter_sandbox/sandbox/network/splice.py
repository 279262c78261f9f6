"""Moving a proxied connection's bytes: two threads splicing between the sockets.

Once the proxy has decided and connected, nothing more is parsed, so the bytes need not pass
through Python: ``os.splice`` moves them socket -> pipe -> socket inside the kernel. Each
direction runs on a thread of its own with blocking sockets (threads are reused from one
connection to the next: forwarder.Workers; the event loop only waits for both to end). An end
of file is passed on as a half-close; an error ends both directions, so neither thread can be
left waiting on a peer that is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
from collections.abc import Callable

from jupyter_sandbox.sandbox.network.forwarder import Workers, pipe, shut_both
from jupyter_sandbox.sandbox.network.sni import read_first_record

# The threads that move the bytes, reused from one connection to the next (see Workers).
_WORKERS = Workers()


async def relay(
    a: socket.socket,
    b: socket.socket,
    check_first: Callable[[bytes], bool] | None = None,
    received: bytes = b"",
) -> None:
    """Copy ``a`` <-> ``b`` until both directions have ended; the caller closes them.

    ``received`` are bytes read from ``a`` already, passed on first. ``check_first``, when
    given, sees ``a``'s first bytes (from ``received`` on; a whole TLS record, see sni.py)
    before they are passed on; False ends the connection there, in both directions.
    """
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    remaining = [2]

    def finished() -> None:
        remaining[0] -= 1
        if remaining[0] == 0 and not done.done():
            done.set_result(None)

    def run(src: socket.socket, dst: socket.socket) -> None:
        try:
            if src is a:
                pump(src, dst, check_first, received)
            else:
                pump(src, dst)
        finally:
            loop.call_soon_threadsafe(finished)

    a.setblocking(True)
    b.setblocking(True)
    for src, dst in ((a, b), (b, a)):
        _WORKERS.submit(functools.partial(run, src, dst))
    try:
        await done
    finally:  # cancelled (the proxy stops): end both threads' waits
        for sock in (a, b):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def pump(
    src: socket.socket,
    dst: socket.socket,
    check_first: Callable[[bytes], bool] | None = None,
    received: bytes = b"",
) -> None:
    """``src`` -> ``dst`` until end of file (then half-close ``dst``) or an error or a refusal
    of the first bytes (then shut both down, which also ends the other direction)."""
    try:
        if check_first is not None:
            received = read_first_record(src, received)
            if received and not check_first(received):
                raise ConnectionAbortedError("refused by the first bytes' check")
        if received:
            dst.sendall(received)
    except OSError:
        shut_both(src, dst)
        return
    pipe(src, dst)  # the forwarder's byte mover: splice inside the kernel where it can
