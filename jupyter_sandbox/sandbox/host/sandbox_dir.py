"""The host directory of one sandbox.

Layout (the whole tree is 0700, owned by the host user)::

    <state_dir>/<sandbox id>/
        state.json      mutable state (context, last activity...), host-only, written atomically
        kernel.json     the host's copy of the in-sandbox kernel's connection file
        tls-ca.key      the sandbox's egress CA's private key, 0600 (network/tls_ca.py)
        trust/          that CA's certificate and the bundle with it, mounted read-only at
                        /etc/jupyter-sandbox (the sandbox reads them, never writes)
        io/             bind-mounted at /run/sandbox; owned by the sandbox's uid; a tmpfs of
                        SandboxSettings.io_size when the host's writes are capped
            kernel.json     the sandbox's copy of that connection file (its own fresh key)
            kernel-1..5     the kernel's ipc:// sockets, created from inside the sandbox
                            (by the bridge, for a sandbox made for memory snapshots)
            bridge-request, bridge-state   the host's requests to that bridge, its answers
            attestation-probe.py, attestation.json   the isolation probe run at boot, its output
        overlay/        a copy-on-write /workspace's upper and work directories (its changes);
                        a tmpfs of the sandbox's workspace size when the host's writes are capped

The container sees only ``io/`` (and ``trust/``, read-only), so it can neither read nor forge
the state file. The host reads nothing the sandbox can write except the sockets, the exit
record, the memory-snapshot bridge's answers, the last line of an in-sandbox program's error
file, and, once at start before any request of the user, the boot-time probe's output, each
with :func:`read_untrusted` (bounded, no link, no FIFO): code in the sandbox may rewrite its copy
of the connection file, and the host never looks at it again. It may also replace a socket by
a link to some host socket; the host connects only to what it checked is a socket there, never
through a link (socket_pin.py).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import secrets
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from jupyter_sandbox.protocol.errors import InvalidSettingError
from jupyter_sandbox.sandbox.backends.base import SANDBOX_IO_DIR
from jupyter_sandbox.sandbox.host.private_paths import make_private_dir
from jupyter_sandbox.sandbox.host.size_caps import mount_capped, unmount_caps
from jupyter_sandbox.sandbox.host.state_record import (
    SandboxState,
    StateTooLargeError,
    read_state,
    state_text,
)
from jupyter_sandbox.sandbox.host.workspace_pin import unpin
from jupyter_sandbox.sandbox.identity import is_sandbox_id

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.11

# sun_path is 108 bytes on Linux; ipc:// appends "-<port>" to the connection file's "ip".
MAX_SOCKET_PATH = 100

log = logging.getLogger(__name__)

KERNEL_SOCKET_PREFIX = "kernel"
IO_MAX_FILES = 4096
# A kernel socket: "kernel-<port>" for generation 0, "kernel-g<N>-<port>" after a restart.
_SOCKET_NAME = re.compile(rf"^{KERNEL_SOCKET_PREFIX}-(?:g(\d+)-)?\d+$")


# How the host opens a file the sandbox may have written or replaced: never through a link,
# never waiting on a FIFO (fstat then refuses anything but a regular file).
UNTRUSTED_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY


def read_untrusted(path: Path, max_bytes: int, *, tail: bool = False) -> bytes:
    """At most ``max_bytes + 1`` bytes (one more than allowed tells the caller it was too
    large) of a file the sandbox may have written: its start, or with ``tail`` its end. OSError
    if it is missing, a link, or not a regular file (a FIFO, a socket, a directory)."""
    fd = os.open(path, UNTRUSTED_READ)
    with os.fdopen(fd, "rb") as file:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        if tail:
            file.seek(max(0, status.st_size - max_bytes))
        return file.read(max_bytes + 1)


@contextlib.contextmanager
def replaced_atomically(path: Path, mode: int = 0o600) -> Iterator[IO[bytes]]:
    """A new file (open for writing and reading) that takes ``path``'s place when the block
    ends, so that readers see the old file or the new one, never half; removed if the block
    fails. It is written beside ``path``, so the rename never crosses a filesystem."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w+b") as f:
            yield f
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: dict[str, Any], mode: int = 0o600) -> None:
    """Write ``data`` to ``path`` so that readers see the old or the new file, never half."""
    with replaced_atomically(path, mode) as f:
        f.write(json.dumps(data, indent=1, sort_keys=True).encode())


def age_of(path: Path) -> float:
    """Seconds since ``path`` last changed (its mtime); infinite once it is gone."""
    try:
        return time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return float("inf")


def sandbox_directories(state_dir: Path) -> list[SandboxDirectory]:
    """Every sandbox's host directory under ``state_dir``, in name order; the state
    directory's other entries (pool/, locks/, the zygote's socket...) are skipped."""
    if not state_dir.is_dir():
        return []
    return [
        SandboxDirectory(state_dir, entry.name)
        for entry in sorted(state_dir.iterdir())
        if is_sandbox_id(entry.name)
    ]


class SandboxDirectory:
    """Creates, fills and removes one sandbox's host directory."""

    def __init__(self, state_dir: Path, sandbox_id: str) -> None:
        self.sandbox_id = sandbox_id
        self.root = state_dir / sandbox_id
        self.io = self.root / "io"
        self.state_file = self.root / "state.json"
        self.state_lock = self.root / "state.lock"
        self.connection_file = self.io / "kernel.json"
        self.host_connection_file = self.root / "kernel.json"
        self.restart_flag = self.io / "restart-requested"
        self.overlay = self.root / "overlay"
        self.overlay_upper = self.overlay / "upper"
        self.overlay_work = self.overlay / "work"
        # The workspace's directory as opened within its root, mounted here (workspace_pin.py).
        self.workspace_source = self.root / "workspace-source"

    @property
    def socket_prefix(self) -> str:
        """The host-side ``ip`` of the first kernel's ipc:// sockets."""
        return self.socket_prefix_of(0)

    def socket_prefix_of(self, generation: int) -> str:
        """The host-side ``ip`` of a kernel generation (each restart binds new paths)."""
        name = KERNEL_SOCKET_PREFIX if generation == 0 else f"{KERNEL_SOCKET_PREFIX}-g{generation}"
        return str(self.io / name)

    @staticmethod
    def container_socket_prefix() -> str:
        return f"{SANDBOX_IO_DIR}/{KERNEL_SOCKET_PREFIX}"

    def create(self, uid: int, io_cap: int = 0) -> None:
        """Make the directory tree; ``io/`` is handed to the sandbox's ``uid``, as a tmpfs of
        ``io_cap`` bytes unless it is 0 (host/size_caps.py)."""
        if len(self.socket_prefix) + 12 > MAX_SOCKET_PATH:  # room for "-g<N>-<port>"
            raise InvalidSettingError(
                f"the sandbox state directory {self.root.parent} is too long for Unix socket "
                f"paths (max about {MAX_SOCKET_PATH} bytes): set SandboxSettings.state_dir to a "
                "shorter path"
            )
        make_private_dir(self.root.parent)
        self.root.mkdir(mode=0o700)
        self.io.mkdir(mode=0o700)
        if io_cap:
            # Few files: sockets, the connection file, the probe's, an archive passing through.
            mount_capped(self.io, io_cap, uid=uid, max_files=IO_MAX_FILES, executable=False)
        else:
            self._give(self.io, uid)

    def create_overlay(self, uid: int, cap: int = 0) -> None:
        """Directories for a copy-on-write /workspace; the sandbox's writes land in ``upper``,
        which with a ``cap`` (bytes) is on a tmpfs of that size (the upper and work directories
        of an overlay must share one filesystem)."""
        self.overlay.mkdir(mode=0o700)
        if cap:
            mount_capped(self.overlay, cap, uid=os.getuid())
        self.overlay_upper.mkdir(mode=0o700)
        self.overlay_work.mkdir(mode=0o700)
        self._give(self.overlay_upper, uid)

    def next_generation(self) -> int:
        """Record the next kernel generation (each binds new socket paths) and return it.

        The sockets of the generations before the current one go: their kernels are gone, and
        under runsc every generation's sockets stay behind (gVisor cannot unlink them), so a
        capped io/ would run out of files after some hundred restarts. Only names are unlinked,
        never followed; whatever the sandbox put there under such a name goes too.
        """
        # One read-modify-write under the state's lock: two restarts at once (a kernel's and
        # one over REST) must not both take the same generation.
        state = self.modify_state(
            lambda state: {**state, "generation": int(state.get("generation", 0)) + 1}
        )
        generation = int(state["generation"])
        for entry in os.scandir(self.io):
            match = _SOCKET_NAME.match(entry.name)
            if match and int(match.group(1) or 0) < generation - 1:
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
        return generation

    def request_restart(self, generation: int) -> None:
        """Tell the sandbox's supervisor to start kernel ``generation`` when this one exits."""
        self.write_for_sandbox(self.restart_flag.name, str(generation))

    def write_for_sandbox(self, name: str, text: str) -> None:
        """Put a file ``name`` in ``io/`` for the running sandbox to read, atomically.

        ``io/`` is writable from inside, so nothing there is followed: the text goes to a new
        file of a random name (``O_EXCL | O_NOFOLLOW``, mode set on the descriptor), which is
        then renamed over ``name``; whatever the sandbox put at either name is replaced, never
        written through. World-readable: the sandbox's uid may not be the host's.
        """
        staging = self.io / f".{name}.{secrets.token_hex(6)}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        fd = os.open(staging, flags, 0o600)
        try:
            os.fchmod(fd, 0o644)
            os.write(fd, text.encode())
        finally:
            os.close(fd)
        os.replace(staging, self.io / name)

    def update_state(self, **changes: Unpack[SandboxState]) -> SandboxState:
        """Merge ``changes`` into the state file, atomically for readers and writers alike."""
        return self.modify_state(lambda state: {**state, **changes})

    def modify_state(self, change: Callable[[SandboxState], SandboxState]) -> SandboxState:
        """Replace the state by ``change(state)``, read and written under the state's lock.

        Several processes write it (the proxy kernel: busy, activity; the server: REST actions,
        claims), so the read-modify-write holds an exclusive ``flock`` on ``state.lock``: no
        writer's change is lost to another's stale copy. Readers never wait (atomic replace).
        ``change`` must be quick and must not take the lock itself.
        """
        fd = os.open(self.state_lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            state = change(self.read_state())
            self.write_state(state)
        finally:
            os.close(fd)  # releases the lock
        return state

    def write_connection_file(
        self, info: dict[str, Any], uid: int, sandbox_copy: dict[str, Any] | None = None
    ) -> None:
        """The host's copy is ``info``; the sandbox's is ``sandbox_copy`` when it differs (a
        bridged kernel listens on TCP inside, see kernel_link.bridged_connection_info)."""
        write_json_atomic(self.host_connection_file, info, mode=0o600)
        write_json_atomic(self.connection_file, sandbox_copy or info, mode=0o600)
        self._give(self.connection_file, uid)

    def write_state(self, state: SandboxState) -> None:
        """Replace the state file by ``state``, its version stamped (host/state_record.py)."""
        with replaced_atomically(self.state_file) as f:
            f.write(state_text(state))

    def read_connection_file(self) -> dict[str, Any]:
        """The host's copy: what the sandbox's kernel was given, whatever it did since."""
        with open(self.host_connection_file) as f:
            data: dict[str, Any] = json.load(f)
        return data

    def read_state(self) -> SandboxState:
        """The state file's record; empty when it is missing or corrupt (CorruptStateError
        is a ValueError). NewerStateError, from host/state_record.py, when a newer release
        wrote it: never read as empty, so that no write of ours replaces what it wrote. A file
        larger than state_record.MAX_STATE_BYTES is not read at all, and logged: nothing a
        request stores makes one, so it is a fault to look into, as the sandbox goes unowned."""
        try:
            return read_state(self.state_file)
        except StateTooLargeError as exc:
            log.error("sandbox %s: %s", self.sandbox_id, exc)
            return {}
        except (FileNotFoundError, ValueError):
            return {}

    def exists(self) -> bool:
        return self.root.is_dir()

    def remove(self) -> None:
        """Remove the whole tree, its caps and pinned workspace unmounted first (so nothing of
        the directory the workspace shows is removed); a missing directory is fine."""
        unpin(self.workspace_source)
        unmount_caps(self.io, self.overlay)
        shutil.rmtree(self.root, onerror=_remove_if_unreadable)

    @staticmethod
    def _give(path: Path, uid: int) -> None:
        if os.getuid() == uid:
            return
        if os.geteuid() != 0:
            raise InvalidSettingError(
                f"cannot hand {path} to sandbox uid {uid} without root: leave "
                "SandboxSettings.sandbox_uid unset so sandboxes run as your own uid"
            )
        os.chown(path, uid, uid)


def _remove_if_unreadable(function: Callable[..., Any], path: str, excinfo: Any) -> None:
    """rmtree's error handler: what cannot be removed stays, except one directory.

    The kernel's overlayfs leaves ``overlay/work/work`` behind, owned by root with mode 000:
    a server that is not root cannot list it, so rmtree would give up on it and keep the whole
    sandbox directory forever. It is empty and its parent is ours: rmdir removes it, and the
    directories above then go as usual."""
    if function in (os.open, os.scandir):
        with contextlib.suppress(OSError):
            os.rmdir(path)
