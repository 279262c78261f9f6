"""The zygote: a process that has imported the proxy kernel and forks one per kernel start.

Starting a proxy kernel is mostly imports (asyncio, zmq, traitlets, jupyter_client, docker);
a fork of a process that already has them skips them all
(figures: docs/explanation/performance.md, "Figures behind the code"). The server extension starts
one zygote (``python -m jupyter_sandbox.kernel.zygote --socket PATH --parent PID``), names its
socket in ``JUPYTER_SANDBOX_ZYGOTE`` (kernels inherit the server's environment), and stops it with
the server. With no server, the headless warm pool's keeper (sandbox/lifecycle/pool_keeper.py)
runs one the same way at a fixed place in the state directory, where the launcher looks when
the variable is unset (sandbox/host/zygote_process.py). The kernelspec's launcher (kernelspec/sandboxed-python/launch.py) connects, sends its
connection file, environment, working directory, umask, pid and standard streams (SCM_RIGHTS); the
zygote forks, and the child applies all that and runs the proxy kernel (zygote_child.py).

Fork safety: before forking, this process runs no event loop, holds no zmq context, no engine
client and no thread (checked before each fork); it only imports.

Trust boundary: the zygote runs as the server's (or keeper's) user and serves that user only. Its socket is
0600 in a 0700 directory under the sandbox state directory, and every connection's peer
credentials (SO_PEERCRED) must show the same uid, and the pid the request names. Whoever passes
those checks could already run any program as this user, so the zygote defends against
mistakes, not against them: it validates the request (a connection file that exists, is a
regular file and is owned by the user; the same interpreter and the same PYTHON* variables as
the zygote's, which it cannot apply after start), and whatever the request says, the child only
ever runs the proxy kernel on that connection file. Requests and refusals are logged without
the environment (it may hold tokens) and connection files are never read here (they hold keys).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import os
import select
import signal
import socket
import stat
import struct
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_sandbox.kernel.log_level import log_level

log = logging.getLogger(__name__)

# What a proxy kernel imports, up to its first engine call (docker-py alone is ~0.14 s).
PRELOAD = (
    "jupyter_sandbox.kernel.__main__",
    "jupyter_sandbox.kernel.zygote_child",
    "jupyter_sandbox.sandbox.backends.docker.backend",
    "jupyter_sandbox.sandbox.backends.docker.engine",
    "netrc",  # requests reads ~/.netrc on the first call
)
MAX_REQUEST_BYTES = 4 << 20  # an environment of a few MB at most
REQUEST_SECONDS = 5.0  # a launcher sends its request at once; a stuck client must not stall us
STREAMS = 3  # stdin, stdout, stderr


class Refused(Exception):
    """A request the zygote will not serve; the message says why (no secrets in it)."""


@dataclass(frozen=True)
class Request:
    connection_file: str
    env: dict[str, str]
    cwd: str
    umask: int
    launcher_pid: int
    fds: list[int]


def python_env(env: dict[str, str]) -> dict[str, str]:
    """The variables that shape an interpreter at its start, which a fork cannot change."""
    return {name: value for name, value in env.items() if name.startswith("PYTHON")}


def validate(raw: dict[str, Any], fds: list[int], peer_pid: int) -> Request:
    """The request, checked; raises Refused with the reason."""
    if len(fds) != STREAMS:
        raise Refused(
            f"expected {STREAMS} file descriptors (stdin, stdout, stderr), got {len(fds)}"
        )
    try:
        request = Request(
            connection_file=str(raw["connection_file"]),
            env={str(k): str(v) for k, v in dict(raw["env"]).items()},
            cwd=str(raw["cwd"]),
            umask=int(raw["umask"]) & 0o777,
            launcher_pid=int(raw["pid"]),
            fds=fds,
        )
        executable = str(raw["executable"])
    except (KeyError, TypeError, ValueError) as exc:
        raise Refused(f"malformed request ({type(exc).__name__}: {exc})") from None
    if request.launcher_pid != peer_pid:
        raise Refused(f"the request names pid {request.launcher_pid}, but pid {peer_pid} sent it")
    if executable != sys.executable:
        raise Refused(f"the kernel runs {executable}, the zygote {sys.executable}")
    if python_env(request.env) != python_env(dict(os.environ)):
        raise Refused("the kernel's PYTHON* environment variables differ from the zygote's")
    path = request.connection_file
    if not os.path.isabs(path):
        raise Refused(f"connection file {path!r} is not an absolute path")
    try:
        info = os.stat(path)
    except OSError as exc:
        raise Refused(f"connection file {path!r}: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise Refused(f"connection file {path!r} is not a regular file")
    if info.st_uid != os.getuid():
        raise Refused(f"connection file {path!r} belongs to uid {info.st_uid}, not to this user")
    if not os.path.isdir(request.cwd):
        raise Refused(f"working directory {request.cwd!r} does not exist")
    return request


def peer_credentials(conn: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end, as the kernel saw it connect."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", creds)
    return pid, uid


def read_request(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """A 4-byte length, then that much JSON; the streams ride on the first bytes."""
    data, fds, _flags, _addr = socket.recv_fds(conn, 4 + 4096, STREAMS + 1)
    try:
        if len(data) < 4:
            raise Refused("no request")
        size = int.from_bytes(data[:4], "big")
        if size > MAX_REQUEST_BYTES:
            raise Refused(f"request of {size} bytes is too large")
        body = bytearray(data[4:])
        while len(body) < size:
            chunk = conn.recv(min(size - len(body), 1 << 16))
            if not chunk:
                raise Refused("the request ended early")
            body += chunk
        raw = json.loads(body)
        if not isinstance(raw, dict):
            raise Refused("the request is not a JSON object")
    except (Refused, ValueError, OSError) as exc:
        _close_all(fds)
        raise Refused(str(exc)) from None
    return raw, fds


def serve(path: Path, parent_pid: int) -> None:
    """Answer kernel starts until SIGTERM or until the server (``parent_pid``) is gone."""
    # The server is the zygote's only reason to exist: when it dies, so does the zygote.
    parent = os.pidfd_open(parent_pid)
    listener = _listen(path)
    listening = os.stat(path)
    # Children are reaped by the system: their launchers get exit codes from them directly.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit_on_signal)
    log.info("zygote %s ready at %s", os.getpid(), path)
    try:
        while True:
            readable, _, _ = select.select([listener.fileno(), parent], [], [])
            if parent in readable:
                log.info("the server (pid %s) is gone; zygote exiting", parent_pid)
                return
            conn, _ = listener.accept()
            with conn:
                _handle(conn, [listener.fileno(), parent])
    finally:
        listener.close()
        _unlink_if_same(path, listening)


def _unlink_if_same(path: Path, listening: os.stat_result) -> None:
    """Remove the socket at ``path`` if it is still this zygote's: once its owner died, the
    owner's successor may already listen there with a zygote of its own."""
    with contextlib.suppress(OSError):
        now = os.stat(path)
        if (now.st_dev, now.st_ino) == (listening.st_dev, listening.st_ino):
            path.unlink()


def _handle(conn: socket.socket, zygote_fds: list[int]) -> None:
    conn.settimeout(REQUEST_SECONDS)
    peer_pid, peer_uid = peer_credentials(conn)
    if peer_uid != os.getuid():
        log.warning("refused a connection from uid %s (pid %s): not this user", peer_uid, peer_pid)
        return
    try:
        raw, fds = read_request(conn)
        try:
            request = validate(raw, fds, peer_pid)
            if threading.active_count() != 1:
                raise Refused("the zygote has threads and cannot fork safely")
            launcher = os.pidfd_open(
                peer_pid
            )  # before the launcher could die and its pid be reused
        except Exception:
            _close_all(fds)
            raise
    except (Refused, OSError) as exc:
        log.warning("refused a kernel request from pid %s: %s", peer_pid, exc)
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps({"refused": str(exc)}).encode() + b"\n")
        return
    _fork(request, conn, launcher, zygote_fds)


def _fork(request: Request, conn: socket.socket, launcher: int, zygote_fds: list[int]) -> None:
    from jupyter_sandbox.kernel.zygote_child import (
        become_kernel,  # preloaded; imported here to keep this light
    )

    sys.stdout.flush()
    sys.stderr.flush()
    # SIGTERM is for the zygote: held back until the child has reset its handlers.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        pid = os.fork()
        if pid == 0:
            _close_all(zygote_fds)  # the kernel must not keep the zygote's socket open
            become_kernel(request, conn, launcher)  # never returns
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    _close_all([*request.fds, launcher])
    log.debug("forked kernel %s for launcher %s", pid, request.launcher_pid)
    with contextlib.suppress(OSError):
        conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")


def _listen(path: Path) -> socket.socket:
    """Bind under a temporary name and rename: whoever finds ``path`` finds it listening."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.parent.stat().st_uid != os.getuid():
        raise PermissionError(f"{path.parent} does not belong to this user")
    path.parent.chmod(0o700)
    staging = path.with_name(path.name + ".binding")
    with contextlib.suppress(OSError):
        staging.unlink()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    mask = os.umask(0o177)  # created 0600, never readable by others even for a moment
    try:
        listener.bind(str(staging))
    finally:
        os.umask(mask)
    listener.listen(64)
    os.replace(staging, path)
    return listener


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(0)


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jupyter_sandbox.kernel.zygote")
    parser.add_argument("--socket", required=True, type=Path, help="where to listen")
    parser.add_argument("--parent", required=True, type=int, help="exit when this pid ends")
    args = parser.parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=log_level(),
        format="[SandboxedPython zygote %(asctime)s %(levelname)s] %(message)s",
    )
    for name in PRELOAD:
        importlib.import_module(name)
    serve(args.socket, args.parent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
