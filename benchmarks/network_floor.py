"""The floors of benchmarks/network.py: what the egress path's byte moving alone costs.

- ``bare_relays``: the path's two relays on the host, without sandbox or policy: client ->
  relay -> Unix socket -> relay -> server, each relay the proxy's own byte mover
  (forwarder.pipe) and nothing else: what relaying the bytes twice costs on this machine.
- ``sandbox_floor``: the sandbox's share alone: bytes sent by the host into a Unix socket in the
  sandbox's own directory (as the host proxy's tunnel is), moved by forwarder.pipe inside the
  sandbox to a loopback TCP connection (as the forwarder does), and read there by a client.
  No proxy, policy, name or HTTP: under gVisor this is the fastest a download through the
  forwarder can be, whatever the host proxy does.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from jupyter_sandbox.sandbox.backends.base import SANDBOX_IO_DIR, ExecOptions
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.network.control import forwarder_source
from jupyter_sandbox.sandbox.network.forwarder import pipe
from jupyter_sandbox.sandbox.network.tunnels import TUNNEL_SEND_BUFFER

CHUNK = b"x" * (1024 * 1024)
FLOOR_SOCKET = "bench-floor.sock"

# Runs inside the sandbox: argv = the Unix socket to listen on, the bytes to expect. The
# forwarder's own source is run first (not as __main__, so only its definitions), so the bytes
# are moved by the same pipe() the forwarder uses. Prints one JSON line.
SANDBOX_FLOOR = r"""
import json, socket, sys, threading, time
names = {"__name__": "forwarder"}
exec(compile(FORWARDER_SOURCE, "forwarder.py", "exec"), names)
path, size = sys.argv[1], int(sys.argv[2])
tunnels = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
tunnels.bind(path)
tunnels.listen(1)
tunnels.settimeout(30)  # the host's sender gave up: fail rather than wait for the exec's limit
server = socket.create_server(("127.0.0.1", 0))
client = socket.create_connection(server.getsockname())
inner, _ = server.accept()
tunnel, _ = tunnels.accept()
start = time.perf_counter()
threading.Thread(target=names["pipe"], args=(tunnel, inner), daemon=True).start()
buf = bytearray(1024 * 1024)
total = 0
while total < size and (n := client.recv_into(buf)):
    total += n
print(json.dumps({"seconds": time.perf_counter() - start, "bytes": total}))
"""

FORWARDER_SOURCE = forwarder_source()


def _send_when_listening(path: Path, size: int) -> None:
    """Connect to ``path`` once it listens (at most 30 s) and send ``size`` bytes."""
    deadline = time.monotonic() + 30
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(path))
            break
        except (FileNotFoundError, ConnectionRefusedError):  # not bound, or not listening yet
            sock.close()
            if time.monotonic() > deadline:
                return
            time.sleep(0.005)
    with sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, TUNNEL_SEND_BUFFER)  # as the proxy's
        view = memoryview(CHUNK)
        while size > 0:
            n = min(size, len(CHUNK))
            sock.sendall(view[:n])
            size -= n


async def sandbox_floor(manager: SandboxManager, owner: str, sandbox_id: str, size: int) -> float:
    """Seconds for ``size`` bytes from the host through the sandbox's half of the path."""
    io_dir = SandboxDirectory(manager.settings.state_path, sandbox_id).io
    (io_dir / FLOOR_SOCKET).unlink(missing_ok=True)  # left by the previous run
    source = f"FORWARDER_SOURCE = {FORWARDER_SOURCE!r}\n{SANDBOX_FLOOR}"
    sender = threading.Thread(
        target=_send_when_listening, args=(io_dir / FLOOR_SOCKET, size), daemon=True
    )
    sender.start()
    argv = ["python", "-c", source, f"{SANDBOX_IO_DIR}/{FLOOR_SOCKET}", str(size)]
    result = await manager.exec(owner, sandbox_id, argv, ExecOptions(timeout=600))
    sender.join(30)
    if result.exit_code != 0:
        raise RuntimeError(result.stderr.decode(errors="replace")[-2000:])
    outcome = json.loads(result.stdout)
    if outcome["bytes"] != size:
        raise RuntimeError(f"the sandbox floor read {outcome['bytes']} of {size} bytes")
    return float(outcome["seconds"])


def accept_each(listener: socket.socket, handle: Callable[[socket.socket], None]) -> None:
    """``handle`` each connection on a thread of its own, until ``listener`` is closed."""
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def relay_each(listener: socket.socket, connect: Callable[[], socket.socket]) -> None:
    """Join each accepted connection to a new one from ``connect``, with the proxy's byte
    mover and nothing else."""

    def join(client: socket.socket) -> None:
        with client, connect() as upstream:
            back = threading.Thread(target=pipe, args=(upstream, client), daemon=True)
            back.start()
            pipe(client, upstream)
            back.join()

    accept_each(listener, join)


def listen() -> tuple[socket.socket, int]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    return listener, listener.getsockname()[1]


def bare_relays(server_port: int, directory: Path) -> tuple[list[socket.socket], str]:
    """The sandbox path's two relays on the host, without sandbox or policy: TCP -> (the
    forwarder's hop) -> Unix socket -> (the host proxy's hop) -> TCP to the server. Returns
    the listeners (to close) and the first relay's host:port."""
    unix_path = str(directory / "relay.sock")
    unix_listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix_listener.bind(unix_path)
    unix_listener.listen(64)

    def to_server() -> socket.socket:
        return socket.create_connection(("127.0.0.1", server_port))

    def to_unix() -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(unix_path)
        return sock

    tcp_listener, port = listen()
    for listener, connect in ((unix_listener, to_server), (tcp_listener, to_unix)):
        threading.Thread(target=relay_each, args=(listener, connect), daemon=True).start()
    return [unix_listener, tcp_listener], f"127.0.0.1:{port}"
