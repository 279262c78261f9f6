"""The forwarder: runs INSIDE the sandbox, between its programs and the host proxy.

The host imports only its constants and its byte mover (``pipe``, shared with the host
proxy's relay): control.py runs this source with the image's Python (``python -c``, a detached
engine exec, as the sandbox's user; its parent is outside the sandbox, so the kernel
supervisor's clean-up at a restart spares it). Standard library only, threads only (no asyncio
import to pay under gVisor), and the threads are reused (``Workers``).

It listens on ``127.0.0.1:<port>`` (what ``HTTP_PROXY`` names; the sandbox has no other
interface) and on the Unix socket ``/run/sandbox/egress.sock``, where the host proxy connects
its idle tunnels (the sandbox cannot connect out to a host socket). Each tunnel is greeted with
the per-sandbox token. Each client connection is joined to one idle tunnel, byte for byte (the
proxy sends a new tunnel for each it hands out; a client waits up to TUNNEL_WAIT for one); with
no tunnel ever (the policy is none, so no host proxy runs) the client is at once given a 403
whose reason phrase names the policy and the target (``refusal_text``), which is what urllib,
requests and pip put in the error they raise. It is started in every sandbox, the policy none
included (control.py), so that nobody meets a bare "connection refused".
The host waits for the socket to appear; a failure to listen is written beside it
(``egress.sock.error``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import json
import os
import queue
import socket
import sys
import threading
import time
from collections.abc import Callable

HELLO = b"JSB-EGRESS 1 "
# Its configuration (token, port, socket path) comes in this variable, never on the command
# line; it is removed from the environment at once.
CONFIG_VARIABLE = "JUPYTER_SANDBOX_EGRESS"
TUNNEL_WAIT = 3.0  # seconds a client waits for a tunnel before it is told there is no network
BUFFER = 1024 * 1024
MAX_CLIENTS = 32  # each client holds two threads; the sandbox's process limit counts them
IDLE_THREAD_SECONDS = 30.0  # how long a thread with nothing to do waits for the next client
# What a refusal adds below its first line when no host proxy is attached.
NO_PROXY_NOTE = (
    "If the policy is not none, the sandbox's host proxy is not running: setting the policy "
    "again starts it."
)
CHANGE_POLICY = "change it in the Sandboxes panel or with JUPYTER_SANDBOX_NETWORK"
MAX_TARGET = 120  # characters of a refused host:port quoted in a refusal
MAX_RULE = 160  # characters of the rule quoted in a refusal


class Workers:
    """Threads that serve one task after another, and end after IDLE_THREAD_SECONDS without one.

    Under gVisor starting a thread costs several times what it does under runc or on the host
    (docs/explanation/performance.md, "Figures behind the code") and each client needs two, one per
    direction, so back-to-back requests reuse them; the host proxy's relay uses them too. Unlike a
    ThreadPoolExecutor's, idle threads end: the sandbox's process limit (256 by default) counts
    them, and a burst of clients must not keep its threads from the sandbox's own programs for
    good."""

    def __init__(self, idle_seconds: float = IDLE_THREAD_SECONDS) -> None:
        self.idle_seconds = idle_seconds
        self._tasks: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0  # threads waiting for a task and not yet promised one

    @property
    def idle(self) -> int:
        """Threads waiting for a task (none promised to one already)."""
        with self._lock:
            return self._idle

    def submit(self, task: Callable[[], None]) -> None:
        """Run ``task`` on a waiting thread, or on a new one when none waits."""
        with self._lock:
            start = self._idle == 0
            if not start:
                self._idle -= 1  # promised: that thread will not end before taking a task
        self._tasks.put(task)
        if start:
            threading.Thread(target=self._work, daemon=True).start()

    def _work(self) -> None:
        while True:
            try:
                task = self._tasks.get(timeout=self.idle_seconds)
            except queue.Empty:
                with self._lock:
                    if self._idle > 0:  # not promised to a task: end
                        self._idle -= 1
                        return
                continue  # promised: the task is on its way
            try:
                task()
            except Exception as exc:  # a bug in one client's task must not end the forwarder
                print(f"forwarder: a client failed: {exc!r}", file=sys.stderr)
            with self._lock:
                self._idle += 1


class Tunnels:
    """Idle tunnels from the host proxy, handed out one per client."""

    def __init__(self) -> None:
        self.idle: list[socket.socket] = []
        self.busy = 0  # tunnels handed out and not yet given back (``done``)
        # Whether a host proxy ever attached: once one has, a refusal cannot tell the policy
        # none (the proxy was stopped) from a proxy that died, and says so.
        self.attached_before = False
        self.cond = threading.Condition()

    def add(self, sock: socket.socket) -> None:
        with self.cond:
            self.idle.append(sock)
            self.attached_before = True
            self.cond.notify()

    def take(self, timeout: float) -> socket.socket | None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                while self.idle:
                    sock = self.idle.pop(0)
                    if _alive(sock):
                        self.busy += 1
                        return sock
                    sock.close()
                # No tunnel, and none ever came: no host proxy is attached (the policy is
                # none), and waiting would only delay the refusal. Once one has attached, it
                # sends a tunnel for each it handed out; under load the next may come after
                # the last was given back, and the client waits for it.
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self.attached_before:
                    return None
                self.cond.wait(remaining)

    def done(self, sock: socket.socket) -> None:
        """Give back a tunnel that ``take`` handed out, closing it."""
        sock.close()
        with self.cond:
            self.busy -= 1


def _alive(sock: socket.socket) -> bool:
    """An idle tunnel is alive when nothing, not even end of file, is waiting on it."""
    try:
        sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)  # b"" (closed) or stray bytes
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False


def pipe(src: socket.socket, dst: socket.socket) -> None:
    """``src`` -> ``dst`` until end of file (then half-close) or an error (then shut both).

    The host proxy's relay (splice.py) moves its bytes with this too: one byte mover for both
    ends of a tunnel.
    """
    try:
        _splice(src, dst)
    except OSError:
        shut_both(src, dst)
        return
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


def pipe_both_ways(a: socket.socket, b: socket.socket, workers: Workers) -> None:
    """``a`` <-> ``b`` until both directions have ended: ``b`` -> ``a`` on one of ``workers``,
    ``a`` -> ``b`` on this thread. The port opener (port_program.py) joins its host connection
    to a server in the sandbox with this too."""
    back_done = threading.Event()

    def back() -> None:
        try:
            pipe(b, a)
        finally:
            back_done.set()

    workers.submit(back)
    pipe(a, b)
    back_done.wait()


def shut_both(src: socket.socket, dst: socket.socket) -> None:
    """End both directions of both sockets, so no thread waits on a peer that is gone."""
    for sock in (src, dst):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _splice(src: socket.socket, dst: socket.socket) -> None:
    """Move the bytes inside the kernel (socket -> pipe -> socket) where it can; else copy."""
    read_end, write_end = os.pipe()
    try:
        with contextlib.suppress(OSError):
            fcntl.fcntl(write_end, 1031, BUFFER)  # F_SETPIPE_SZ: fewer, larger splices
        while True:
            try:
                n = os.splice(src.fileno(), write_end, BUFFER)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                _copy(src, dst)
                return
            if n == 0:
                return
            while n:
                n -= os.splice(read_end, dst.fileno(), n)
    finally:
        os.close(read_end)
        os.close(write_end)


def _copy(src: socket.socket, dst: socket.socket) -> None:
    buf = bytearray(BUFFER)
    view = memoryview(buf)
    while n := src.recv_into(buf):
        dst.sendall(view[:n])


def refusal_text(mode: str, target: str, rule: str = "", remedy: str = CHANGE_POLICY) -> str:
    """The one line a refused program shows its user: the policy, the target, the rule and how
    to change it. Used as the 403's reason phrase by this forwarder and by the host proxy, so
    it is printable ASCII only (anything else becomes ``?``) and bounded (the quoted target and
    rule are cut, never the remedy): a reason phrase is a header line, and the target is
    whatever the sandbox asked for."""
    why = f" ({_printable(rule, MAX_RULE)})" if rule else ""
    return (
        f"jupyter-sandbox: network policy {_printable(mode, 40)}: "
        f"{_printable(target, MAX_TARGET)} not allowed{why}; {_printable(remedy, MAX_RULE)}"
    )


def _printable(text: str, limit: int) -> str:
    cut = text if len(text) <= limit else text[: limit - 3] + "..."
    return "".join(c if " " <= c <= "~" else "?" for c in cut)


def request_target(head: bytes) -> str:
    """``host:port`` of a proxy request head (CONNECT or an absolute http:// URI); ``?`` when
    the request line is neither. Only for the refusal's text: nothing is sent anywhere."""
    words = head.split(b"\r\n", 1)[0].split(b" ")
    if len(words) != 3:
        return "?"
    method, target = words[0], words[1].decode("ascii", "replace")
    if method == b"CONNECT":
        return target
    scheme, sep, rest = target.partition("://")
    if not sep or scheme.lower() != "http":
        return "?"
    authority = rest.split("/", 1)[0].split("?", 1)[0].rsplit("@", 1)[-1]
    has_port = authority.rpartition(":")[2].isdigit() and not authority.endswith("]")
    return authority if has_port else f"{authority}:80"


def _refuse(client: socket.socket, mode: str) -> None:
    """Answer a client when no host proxy is attached, after reading its request head: a 403
    whose reason phrase is the refusal under ``mode`` (clients show the reason, not the
    body)."""
    client.settimeout(5)
    data = b""
    try:
        while b"\r\n\r\n" not in data and len(data) < 65536:
            chunk = client.recv(65536)
            if not chunk:
                break
            data += chunk
        reason = refusal_text(mode, request_target(data))
        body = f"{reason}\n{NO_PROXY_NOTE}\n".encode()
        head = (
            f"HTTP/1.1 403 {reason}\r\nContent-Type: text/plain\r\nConnection: close\r\n"
            f"Content-Length: {len(body)}\r\n"
            "X-Jupyter-Sandbox-Denied: network policy is none or its host proxy is not running"
            "\r\n\r\n"
        )
        client.sendall(head.encode() + body)
        client.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _serve_client(
    client: socket.socket,
    tunnels: Tunnels,
    slots: threading.BoundedSemaphore,
    workers: Workers,
) -> None:
    try:
        tunnel = tunnels.take(TUNNEL_WAIT)
        if tunnel is None:
            _refuse(
                client, "none (or its host proxy stopped)" if tunnels.attached_before else "none"
            )
            return
        pipe_both_ways(client, tunnel, workers)
        tunnels.done(tunnel)
    finally:
        client.close()
        slots.release()


def _serve_tunnels(listener: socket.socket, hello: bytes, tunnels: Tunnels) -> None:
    while True:
        sock, _ = listener.accept()
        try:
            sock.sendall(hello)
        except OSError:
            sock.close()
            continue
        tunnels.add(sock)


def listening_unix(path: str, backlog: int) -> socket.socket:
    """A Unix socket listening at ``path``, which appears only once it listens: bound under a
    temporary name, then renamed. The host connects as soon as the path exists
    (programs/inside_listener.py); bound in place, a connection between bind and listen was
    refused (seen under runsc on a loaded machine, tests/sandbox/operations/test_ports.py)."""
    staging = path + ".binding"
    with contextlib.suppress(OSError):
        os.unlink(staging)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(staging)
        listener.listen(backlog)
        os.replace(staging, path)
    except OSError:
        listener.close()
        raise
    return listener


def main() -> None:
    config = json.loads(os.environ.pop(CONFIG_VARIABLE))
    port, path = int(config["port"]), config["path"]
    hello = HELLO + config["token"].encode() + b"\n"
    clients = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    clients.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        clients.bind(("127.0.0.1", port))
        clients.listen(128)
        tunnel_listener = listening_unix(path, 64)  # last: the host waits for this path
    except OSError as exc:
        with contextlib.suppress(OSError), open(path + ".error", "w") as f:
            f.write(f"cannot listen on 127.0.0.1:{port} and {path}: {exc}")
        sys.exit(1)
    tunnels = Tunnels()
    threading.Thread(
        target=_serve_tunnels, args=(tunnel_listener, hello, tunnels), daemon=True
    ).start()
    slots = threading.BoundedSemaphore(MAX_CLIENTS)
    workers = Workers()
    while True:
        slots.acquire()  # at most MAX_CLIENTS at a time; the rest wait in the listen queue
        client, _ = clients.accept()
        workers.submit(functools.partial(_serve_client, client, tunnels, slots, workers))


# Run only as the forwarder (ports.py sends this source, with no configuration, before its own).
if __name__ == "__main__" and CONFIG_VARIABLE in os.environ:
    main()
