"""The port opener: runs INSIDE the sandbox and joins the host to a server on its loopback.

The sandbox has no interface but ``lo``, so a web app started in it (``python -m http.server``,
Streamlit, a Dash board) can be reached from the host only through the sandbox's directory. This
program listens on a Unix socket there (``/run/sandbox/ports-<n>.sock``; the sandbox may create
sockets in it, never connect to the host's) and, for each connection the host makes, reads one
line, ``JSB-PORT 1 <port>``, connects to that port on the sandbox's loopback, answers ``OK`` or
``ERR <why>`` and then moves bytes both ways until either side ends. Run with ``--list`` instead,
it prints the listening TCP ports with the command line of the process that listens (JSON).

Nothing here is trusted by the host: code in the sandbox may kill this program, replace it or
answer in its place; it can only ever reach its own sandbox's servers, which it controls anyway.
What the host guards against is its own side (ports.py: a pinned socket, a bounded greeting).

It is sent with the network forwarder's source in front of it (ports.py), whose byte mover and
reusable threads it shares; standard library only. ``python -c SOURCE SOCKET_PATH|--list``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import socket
import sys
import threading

if __package__:  # imported on the host; inside the sandbox forwarder.py's source comes first
    from jupyter_sandbox.sandbox.network.forwarder import (
        Workers,
        listening_unix,
        pipe_both_ways,
    )

GREETING = b"JSB-PORT 1 "
MAX_GREETING = 64  # bytes: a port number and the prefix, with room to spare
GREETING_TIMEOUT = 10.0  # seconds the host has to say which port
MAX_CONNECTIONS = 64  # each holds two threads; the sandbox's process limit counts them


def read_port(conn: socket.socket) -> int:
    """The port the host asks for; ValueError for anything but a well-formed greeting."""
    conn.settimeout(GREETING_TIMEOUT)
    line = b""
    while not line.endswith(b"\n"):
        chunk = conn.recv(1)  # byte by byte: what follows the line belongs to the server
        if not chunk or len(line) >= MAX_GREETING:
            raise ValueError("no greeting")
        line += chunk
    conn.settimeout(None)
    if not line.startswith(GREETING) or not line[len(GREETING) : -1].isdigit():
        raise ValueError(f"not a greeting: {line[:MAX_GREETING]!r}")
    port = int(line[len(GREETING) : -1])
    if not 0 < port < 65536:
        raise ValueError(f"no port {port}")
    return port


def connect_loopback(port: int) -> socket.socket:
    """A connection to ``port`` on the sandbox's loopback, IPv4 first, then IPv6."""
    failure: OSError | None = None
    for family, address in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        server = socket.socket(family, socket.SOCK_STREAM)
        try:
            server.connect((address, port))
        except OSError as exc:
            server.close()
            failure = failure or exc
            continue
        return server
    assert failure is not None
    raise failure


def serve(conn: socket.socket, slots: threading.BoundedSemaphore, workers: Workers) -> None:
    """One host connection: greeting, answer, then the bytes of one TCP connection."""
    try:
        try:
            port = read_port(conn)
        except (OSError, ValueError):
            return
        try:
            server = connect_loopback(port)
        except OSError as exc:
            with contextlib.suppress(OSError):
                conn.sendall(f"ERR nothing listens on port {port} ({exc.strerror})\n".encode())
            return
        conn.sendall(b"OK\n")
        pipe_both_ways(conn, server, workers)
        server.close()
    finally:
        conn.close()
        slots.release()


def listening() -> dict[str, object]:
    """``listening``: (port, command line of its process) of each listening TCP socket the
    sandbox's user can see, from /proc (the same under runc and gVisor; the image need not have
    ``ss``); ``ephemeral_from``: the first port the kernel picks for a socket bound to port 0
    (32768 under Linux, 16000 under gVisor)."""
    # The sockets first, their processes after: a server that starts listening while /proc is
    # walked (the network forwarder of a fresh sandbox) would otherwise be listed with no
    # command, as if a user's. A process that ends in between leaves its socket's command empty.
    sockets: list[tuple[int, str]] = []  # (port, socket inode)
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = [line.split() for line in f.read().splitlines()[1:]]
        except OSError:
            continue
        for row in rows:
            if len(row) > 9 and row[3] == "0A":  # TCP_LISTEN
                sockets.append((int(row[1].rsplit(":", 1)[1], 16), row[9]))
    commands: dict[str, str] = {}  # socket inode -> command line
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            descriptors = os.listdir(f"/proc/{pid}/fd")
        except OSError:  # ended meanwhile, or not ours
            continue
        for fd in descriptors:
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    commands.setdefault(target[8:-1], command[:200])
    found = [(port, commands.get(inode, "")) for port, inode in sockets]
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral_from = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_from = 32768
    return {"listening": found, "ephemeral_from": ephemeral_from}


def main(path: str) -> None:
    try:
        listener = listening_unix(path, 64)  # the host waits for this path to appear
    except OSError as exc:
        with contextlib.suppress(OSError), open(path + ".error", "w") as f:
            f.write(f"cannot listen on {path}: {exc}")
        sys.exit(1)
    slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
    workers = Workers()
    while True:
        slots.acquire()  # at most MAX_CONNECTIONS at a time; the rest wait in the listen queue
        conn, _ = listener.accept()
        workers.submit(functools.partial(serve, conn, slots, workers))


if __name__ == "__main__" and len(sys.argv) == 2:
    if sys.argv[1] == "--list":
        print(json.dumps(listening()))
    else:
        main(sys.argv[1])
