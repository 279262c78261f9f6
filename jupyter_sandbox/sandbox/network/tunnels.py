"""The host proxy's connections *into* the sandbox, which carry the sandbox's requests.

A sandbox cannot open a host Unix socket (gVisor runs with ``--host-uds=create``: it may create
sockets in its directory, never connect to the host's), so the direction is reversed: the
forwarder inside the sandbox listens on ``/run/sandbox/egress.sock`` (``<state>/<id>/io/`` on
the host) and the host proxy keeps ``idle_tunnels`` connections open to it. The forwarder hands
each new client on its loopback port one idle tunnel; the proxy serves the request arriving on
it and opens a replacement. The proxy itself listens nowhere, so no other local process can use
a sandbox's egress.

The tunnel socket lies in a directory the sandbox can write, so the proxy connects only to the
socket it found there, never through a link the sandbox planted (socket_pin.py), and before
trusting a connection requires the forwarder's hello with the per-sandbox token, sent first by
the forwarder: a peer that does not know the token is sent nothing.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import socket
from pathlib import Path

from jupyter_sandbox.protocol.errors import SocketReplacedError
from jupyter_sandbox.sandbox.host.timeouts import within
from jupyter_sandbox.sandbox.kernel_link.socket_pin import connect_pinned
from jupyter_sandbox.sandbox.network.egress_proxy import EgressProxy

log = logging.getLogger(__name__)

HELLO = b"JSB-EGRESS 1 "
HELLO_TIMEOUT = 10.0
MAX_BACKOFF = 2.0
# Bytes the host may have on its way into a tunnel (SO_SNDBUF; Linux doubles what is asked and
# caps it at twice net.core.wmem_max). Under gVisor the Sentry reads a tunnel from the host
# socket, waking for what it finds there: in 3 interleaved pairs of runs (benchmarks/network.py
# --runtime runsc --size 100 --runs 5) a 100 MiB download ran at 516-681 MB/s with the default
# (~208 KiB) and 642-812 MB/s with this, faster in every pair (5.1-7.1x the host's own time ->
# 4.0-5.8x). Under runc it changes nothing measurable. A limit, not an allocation: an idle
# tunnel holds nothing.
TUNNEL_SEND_BUFFER = 1024 * 1024


class TunnelRefused(Exception):
    """The peer at the tunnel socket is not this sandbox's forwarder."""


async def open_tunnel(path: Path, token: str) -> tuple[socket.socket, bytes]:
    """A connection to the forwarder at ``path`` that presented ``token``, and whatever the
    forwarder's client already sent after the hello."""
    try:
        sock = await connect_pinned(str(path))
    except SocketReplacedError as exc:  # a link or a file planted by the sandbox
        raise TunnelRefused(exc.message) from None
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, TUNNEL_SEND_BUFFER)
    loop = asyncio.get_running_loop()
    try:
        received = b""
        deadline = loop.time() + HELLO_TIMEOUT
        while b"\n" not in received and len(received) <= len(HELLO) + 256:
            chunk = await within(loop.sock_recv(sock, 4096), deadline - loop.time())
            if not chunk:
                break
            received += chunk
    except (OSError, asyncio.TimeoutError) as exc:
        sock.close()
        raise TunnelRefused(f"the peer sent no hello ({exc!r})") from None
    except BaseException:
        sock.close()
        raise
    line, _, rest = received.partition(b"\n")
    presented = line[len(HELLO) :].strip() if line.startswith(HELLO) else b""
    if not hmac.compare_digest(presented, token.encode()):
        sock.close()
        raise TunnelRefused("the peer did not present the sandbox's token")
    return sock, rest


class TunnelKeeper:
    """Keeps ``idle`` tunnels open, never more than ``max_connections`` in all."""

    def __init__(
        self, path: Path, token: str, proxy: EgressProxy, *, idle: int, max_connections: int
    ) -> None:
        self.path = path
        self.token = token
        self.proxy = proxy
        self.idle = max(1, idle)
        self.slots = asyncio.Semaphore(max(self.idle, max_connections))
        self.ready = asyncio.Event()  # set once a first tunnel is open
        self.tasks: set[asyncio.Task[None]] = set()
        self._backoff = 0.0

    def start(self) -> None:
        for _ in range(self.idle):
            self._spawn()

    async def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    def _spawn(self, delay: float = 0.0) -> None:
        task = asyncio.get_running_loop().create_task(self._tunnel(delay))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _tunnel(self, delay: float) -> None:
        if delay:
            await asyncio.sleep(delay)
        async with self.slots:
            try:
                sock, received = await open_tunnel(self.path, self.token)
            except (OSError, TunnelRefused) as exc:
                # Only the first failure of a streak is logged: a paused or dying sandbox would
                # otherwise add a line to the log at every retry.
                first = self._backoff == 0.0
                self._backoff = min(MAX_BACKOFF, self._backoff * 2 or 0.05)
                (log.warning if first else log.debug)(
                    "tunnel to %s failed: %s; retrying", self.path, exc
                )
                self._spawn(self._backoff)
                return
            self._backoff = 0.0
            self.ready.set()
            replaced = False

            def started() -> None:  # the tunnel now carries a request: keep `idle` waiting
                nonlocal replaced
                replaced = True
                self._spawn()

            try:
                await self.proxy.handle(sock, received, started)
            except Exception:  # one request's failure must not end the proxy
                log.exception("proxying a request failed")
            finally:
                sock.close()
        if not replaced:  # an idle tunnel the forwarder closed: open another, gently
            self._backoff = min(MAX_BACKOFF, self._backoff * 2 or 0.05)
            self._spawn(self._backoff)
