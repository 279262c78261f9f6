"""The kernel bridge: host-facing sockets for a kernel that listens on loopback TCP.

Used only by sandboxes made for memory snapshots (``SandboxSettings.memory_snapshots``).
gVisor cannot checkpoint a sandbox that holds host Unix sockets, and a kernel's ``ipc://``
sockets are exactly that. So such a kernel binds ``tcp://127.0.0.1`` inside the sandbox (its
own network namespace, loopback only), and this bridge, in the supervisor, owns the host-facing
sockets: it binds ``ipc://<prefix>-<n>`` (the paths an ``ipc://`` kernel would have bound) and
proxies each to the kernel's port ``n + port_offset`` with ``zmq.proxy`` (in C): ROUTER to
DEALER for shell, control, stdin and heartbeat (replies find their way back through the routing
identities, as through any ZMQ broker), XPUB to XSUB for iopub.

Why a ZMQ proxy and not a byte copy per connection: runsc 20240729 saves an epoll instance's
ready list while its network stack still runs (gVisor PR 14147), and a socket the kernel's ZMQ
closed before a checkpoint can come back as a stale event after the restore, pointing at memory
libzmq has freed: the restored kernel crashes (measured: 7 of 12 restores when each host
connection had its own connection to the kernel). Here the kernel sees one connection per
channel, made once per kernel and never closed while it lives; the host-facing side is a ZMQ
context of its own, terminated before each checkpoint, so its epoll instance goes with it.

The host steers it through two files in the sandbox directory, because it can reach nothing
else inside: it writes ``bridge-request`` ({"id", "action": "close"|"open", "generation"}) and
waits for ``bridge-state`` to echo the id. "close" ends every host socket, so that a checkpoint
finds none; "open" binds a new generation of paths after a restore (gVisor lets a sandbox create
host sockets but not bind over old ones). A kernel restart opens its new generation too.
"""

import json
import os
import threading
import time

import zmq

# Seconds between looks for a request of the host; a checkpoint waits at most this long.
REQUEST_POLL = 0.02
LISTEN_POLL = 0.02  # how often a new kernel's ports are looked for while it starts
# The host-facing and kernel-facing socket types of each channel.
CHANNELS = {
    "shell_port": (zmq.ROUTER, zmq.DEALER),
    "control_port": (zmq.ROUTER, zmq.DEALER),
    "stdin_port": (zmq.ROUTER, zmq.DEALER),
    "hb_port": (zmq.ROUTER, zmq.DEALER),
    "iopub_port": (zmq.XPUB, zmq.XSUB),
}
# One routing identity on every kernel-facing socket: the kernel sends stdin's input_request to
# the identities of the shell request it answers, as jupyter_client's clients arrange too.
IDENTITY = b"sandbox-bridge"
TCP_LISTEN = "0A"  # the state column of /proc/net/tcp


class Bridge:
    def __init__(self, io_dir, info):
        self.io_dir = io_dir
        self.offset = info["bridge_port_offset"]
        self.ports = {name: info[name] for name in CHANNELS}  # the kernel's TCP ports
        self.request_file = os.path.join(io_dir, "bridge-request")
        self.state_file = os.path.join(io_dir, "bridge-state")
        self._lock = threading.Lock()
        self._kernel = None  # (context, {channel: socket}) of the current kernel
        self._host = None  # (context, [(control socket, proxy thread)]) while open

    def prefix(self, generation):
        name = "kernel" if generation == 0 else f"kernel-g{generation}"
        return os.path.join(self.io_dir, name)

    def follow_kernel(self, generation, kernel):
        """Connect to a new kernel once it listens, then open its generation's host sockets
        (run on a thread: the supervisor goes on with the boot probe meanwhile)."""
        while not self._listening():
            if kernel.poll() is not None:
                return  # it died starting: the supervisor reports it
            time.sleep(LISTEN_POLL)
        with self._lock:
            self._close_host()
            if self._kernel is not None:  # the previous kernel's (it has exited)
                self._kernel[0].destroy(linger=0)
            context = zmq.Context()
            sockets = {}
            for channel, (_, kind) in CHANNELS.items():
                sock = context.socket(kind)
                sock.linger = 0
                if kind == zmq.DEALER:
                    sock.identity = IDENTITY
                sock.connect(f"tcp://127.0.0.1:{self.ports[channel]}")
                sockets[channel] = sock
            self._kernel = (context, sockets)
            self._open_host(generation)

    def serve_requests(self):
        """Answer the host's requests until the sandbox ends (run on a daemon thread)."""
        done = None
        while True:
            time.sleep(REQUEST_POLL)
            try:
                with open(self.request_file) as f:
                    request = json.load(f)
            except (OSError, ValueError):
                continue
            if not isinstance(request, dict) or request.get("id") in (None, done):
                continue
            done = request["id"]
            answer = {"id": done}
            try:
                with self._lock:
                    if request.get("action") == "close":
                        self._close_host()
                    elif request.get("action") == "open":
                        self._open_host(int(request["generation"]))
                    else:
                        raise ValueError(f"unknown action {request.get('action')!r}")
            except (OSError, ValueError, KeyError, TypeError, zmq.ZMQError) as exc:
                answer["error"] = f"{type(exc).__name__}: {exc}"
            with open(self.state_file + ".tmp", "w") as f:
                json.dump(answer, f)
            os.replace(self.state_file + ".tmp", self.state_file)

    def _open_host(self, generation):
        if self._kernel is None:
            raise ValueError("no kernel is listening yet")
        self._close_host()
        context = zmq.Context()
        proxies = []
        for channel, (kind, _) in CHANNELS.items():
            front = context.socket(kind)
            front.linger = 0
            front.bind(f"ipc://{self.prefix(generation)}-{self.ports[channel] - self.offset}")
            control = context.socket(zmq.PAIR)
            control.bind(f"inproc://control-{channel}")
            thread = threading.Thread(
                target=_proxy, args=(context, front, self._kernel[1][channel], channel)
            )
            thread.daemon = True
            thread.start()
            proxies.append((control, thread))
        self._host = (context, proxies)

    def _close_host(self):
        if self._host is None:
            return
        context, proxies = self._host
        self._host = None
        for control, thread in proxies:
            control.send(b"TERMINATE")
            thread.join()
            control.close()
        context.destroy(linger=0)  # its I/O thread, and the epoll instance, end with it

    def _listening(self):
        """Whether every port of the kernel listens (read from /proc: a probe connection
        would be a connection the kernel sees come and go)."""
        wanted = {f"0100007F:{port:04X}" for port in self.ports.values()}
        try:
            with open("/proc/net/tcp") as f:
                rows = [line.split() for line in f.read().splitlines()[1:]]
        except OSError:
            return False
        listening = {row[1] for row in rows if len(row) > 3 and row[3] == TCP_LISTEN}
        return wanted <= listening


def _proxy(context, front, back, channel):
    """Relay ``front`` and ``back`` until the bridge's control socket says TERMINATE; the
    kernel-facing ``back`` stays open for the next generation."""
    control = context.socket(zmq.PAIR)
    control.connect(f"inproc://control-{channel}")
    try:
        zmq.proxy_steerable(front, back, None, control)
    except zmq.ContextTerminated:
        pass
    finally:
        control.close()
        front.close()
