"""Sandboxed Python's kernel command: ask the server's zygote for a kernel, else start one.

Run as ``python -I -S launch.py -f CONNECTION_FILE`` (kernel.json): standard library only, so it
starts in ~15 ms. With a zygote (``JUPYTER_SANDBOX_ZYGOTE``, set by the server extension in the
server's environment, which kernels inherit), it hands the zygote this process's connection file,
environment, working directory, umask and standard streams; the zygote forks an already-imported
proxy kernel for them (jupyter_sandbox/kernel/zygote.py). This process then stands in for that
kernel, so jupyter_client sees what it always sees: SIGTERM and SIGINT are passed on, and this
process exits with the kernel's exit code. If the kernel's launcher dies, the kernel exits.

With no server (nbconvert, papermill, a jupyter_client script), the variable is unset; the
headless warm pool's keeper then runs a zygote of its own at a fixed place in the default state
directory (:func:`headless_zygote`; jupyter_sandbox/sandbox/lifecycle/pool_keeper.py), and the
launcher asks that one if its socket is there. A state directory set in a configuration file is
not seen here (this process reads none): its kernels start the ordinary way.

Without a zygote, or if it refuses, or its socket is stale, this process becomes the ordinary
proxy kernel (``execv``: same pid, same interpreter, same environment): nothing changes for
plain jupyter_client. Before it sends anything (the environment may hold tokens), the launcher
checks that the zygote runs as this user (SO_PEERCRED). Never with the notebook's directory on
sys.path (:func:`kernel_command`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import sys
from types import FrameType

ZYGOTE_ENV = "JUPYTER_SANDBOX_ZYGOTE"
CONNECT_SECONDS = 5.0  # the zygote answers at once; a stuck one must not stall the kernel
FORWARDED = (signal.SIGTERM, signal.SIGINT)
# Where the headless keeper's zygote listens in a state directory: the package's
# sandbox/host/zygote_process.py names the same (this file imports nothing of the package).
HEADLESS_SOCKET = ("zygote", "headless.sock")


class Launcher:
    """Holds the forked kernel's pidfd once it exists, and the signals that came before it."""

    def __init__(self) -> None:
        self.kernel_pidfd: int | None = None
        self.pending: list[int] = []
        for signum in FORWARDED:
            signal.signal(signum, self.forward)

    def forward(self, signum: int, frame: FrameType | None) -> None:
        if self.kernel_pidfd is None:
            self.pending.append(signum)
            return
        with contextlib.suppress(ProcessLookupError):  # it is exiting; its code is on its way
            signal.pidfd_send_signal(self.kernel_pidfd, signum)

    def run_in_zygote(self, path: str, connection_file: str) -> int | None:
        """The forked kernel's exit code, or None if the zygote did not start one."""
        request = {
            "connection_file": os.path.realpath(connection_file),
            "env": dict(os.environ),
            "cwd": os.getcwd(),
            "umask": _umask(),
            "pid": os.getpid(),
            "executable": sys.executable,
        }
        payload = json.dumps(request).encode()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            try:
                sock.settimeout(CONNECT_SECONDS)
                sock.connect(path)
                creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
                _pid, uid, _gid = struct.unpack("3i", creds)
                if uid != os.getuid():
                    _note(f"the zygote at {path} runs as uid {uid}, not as this user")
                    return None
                first = len(payload).to_bytes(4, "big") + payload[:4096]
                sent = socket.send_fds(sock, [first], [0, 1, 2])
                # Only what is left, if anything: a send of nothing after a zygote that
                # refused the request and closed fails with EPIPE, and its answer is lost.
                if rest := first[sent:] + payload[4096:]:
                    sock.sendall(rest)
                answer = sock.makefile("rb")
                started = json.loads(answer.readline() or b"{}")
            except (OSError, ValueError) as exc:
                _note(f"no zygote at {path} ({exc}); starting the kernel directly")
                return None
            if "pid" not in started:
                _note(f"the zygote refused: {started.get('refused', 'no answer')}")
                return None
            sock.settimeout(None)  # from here on, the kernel lives as long as it likes
            with contextlib.suppress(ProcessLookupError):  # it ended; its code is on its way
                self.kernel_pidfd = os.pidfd_open(int(started["pid"]))
            for signum in self.pending:
                self.forward(signum, None)
            try:
                for line in answer:
                    ended = json.loads(line)
                    if "exit" in ended:
                        return int(ended["exit"])
            except (OSError, ValueError):
                pass
        _note("the kernel ended without an exit code (killed by a signal?)")
        return 1

    def exec_proxy(self, connection_file: str) -> None:
        """Become the ordinary proxy kernel, or die of a signal that came before it could."""
        for forwarded in FORWARDED:
            signal.signal(forwarded, signal.SIG_DFL)
        for signum in self.pending:
            os.kill(os.getpid(), signum)
        os.execv(sys.executable, kernel_command(connection_file))


def kernel_command(connection_file: str, safe_path_flag: bool | None = None) -> list[str]:
    """``python -m jupyter_sandbox.kernel -f CONNECTION_FILE`` without the working directory
    (the notebook's, which the user writes) first on sys.path: a ``jupyter_sandbox/`` or
    ``socket.py`` there would run on the host. jupyter_sandbox/sandbox/host/python_command.py says more;
    this file imports nothing of the package, so it keeps this copy. ``safe_path_flag``: -P
    (default: when this Python has it); False, the bootstrap for older ones (tested on all)."""
    if safe_path_flag is None:
        safe_path_flag = sys.version_info >= (3, 11)
    if safe_path_flag:
        return [sys.executable, "-P", "-m", "jupyter_sandbox.kernel", "-f", connection_file]
    bootstrap = (  # -c puts "" first on sys.path: drop it before anything is imported
        "import sys; del sys.path[0]; import runpy; "
        "runpy.run_module('jupyter_sandbox.kernel', run_name='__main__', alter_sys=True)"
    )
    return [sys.executable, "-c", bootstrap, "-f", connection_file]


def headless_zygote(env: dict[str, str] | None = None) -> str:
    """The headless keeper's zygote socket in the default state directory
    (``SandboxSettings.state_dir``: ``<jupyter runtime dir>/sandboxes``), computed from ``env``
    (default: this process's) as jupyter_core computes the runtime directory on Linux."""
    env = dict(os.environ) if env is None else env
    runtime = env.get("JUPYTER_RUNTIME_DIR")
    if not runtime:
        data = env.get("JUPYTER_DATA_DIR")
        if not data:
            home = os.path.realpath(env.get("HOME") or os.path.expanduser("~"))
            xdg = env.get("XDG_DATA_HOME") or os.path.join(home, ".local", "share")
            data = os.path.join(xdg, "jupyter")
        runtime = os.path.join(data, "runtime")
    return os.path.join(runtime, "sandboxes", *HEADLESS_SOCKET)


def _umask() -> int:
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def _note(text: str) -> None:
    print(f"[SandboxedPython launcher] {text}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "-f":
        print("usage: python -I -S launch.py -f CONNECTION_FILE", file=sys.stderr)
        return 2
    connection_file = argv[1]
    launcher = Launcher()
    path: str | None = os.environ.get(ZYGOTE_ENV)
    if not path:  # no server: the headless pool's zygote, if it listens
        path = headless_zygote()
        if not os.path.exists(path):
            path = None
    if path:
        code = launcher.run_in_zygote(path, connection_file)
        if code is not None:
            return code
    launcher.exec_proxy(connection_file)
    return 1  # not reached: execv returns only by raising


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
