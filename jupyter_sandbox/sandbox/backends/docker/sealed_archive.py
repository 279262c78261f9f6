"""A tar of a sandbox's /workspace that no process of the sandbox can forge (security row 43).

A tar run in the sandbox as the sandbox's own user can be stopped by the sandbox's code, which
then writes the archive's bytes itself (the ``host-dir`` transport's file in io/) or opens the
archiver's standard output through ``/proc/<pid>/fd/1`` (the ``exec`` transport). So what the
host stores would be what that code chose, not what /workspace held. Here, per runtime:

* **runsc**: the archiver (GNU tar, by absolute path) runs as a privileged exec as uid 0,
  started by ``env -i`` and setpriv (image_programs.with_only_read_search): no_new_privs, every
  capability dropped but CAP_DAC_READ_SEARCH (to read the sandbox user's 0600 files and 0700
  directories) before tar starts, and none of the exec's environment. The container's own
  variables (which a request may set: ``LD_PRELOAD``) are set empty for the exec, so not even
  ``env`` and setpriv, which start with every capability, load anything the sandbox chose.
  The sandbox's user (another uid, no capability) cannot signal it, ptrace it or open its
  ``/proc/<pid>/fd`` (measured inside gVisor: tests/security/test_snapshot_forgery.py), and
  tar writes to the exec's standard output, which only the host reads, through the bounded
  reader (stream.py). The privileged exec stays inside gVisor: the capabilities are gVisor's,
  not the host's. Only the host starts execs, and only this module asks for a privileged one.
* **runc**: the engine refuses a privileged exec in a container with no-new-privileges
  ("unable to apply caps"), so the host, if it is root, reads the sandbox itself: it pauses it
  (the cgroup freezer, through the exec gate as :meth:`DockerBackend.pause` does), opens
  ``/proc/<pid>/root`` of its init (checked to be in the container's cgroup, so a recycled pid
  or another pid namespace is refused), and writes the tar of ``workspace`` there with a walk
  that follows no link at any component (snapshots/nofollow_tar.py); then it thaws the sandbox,
  whatever happened. Frozen, nothing in the sandbox runs while it is read.

A server that is not root under runc cannot read ``/proc/<pid>/root``: :func:`why_not_sealed`
says so, and snapshots/persist.py archives the way it did before (forgeable, logged).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import defaultdict
from typing import Any

from jupyter_sandbox.protocol.errors import SandboxError
from jupyter_sandbox.protocol.snapshot_errors import SnapshotFailedError
from jupyter_sandbox.sandbox.backends.base import WORKSPACE_DIR, Sink
from jupyter_sandbox.sandbox.backends.docker.engine import DockerEngine
from jupyter_sandbox.sandbox.backends.docker.exec import Inspect
from jupyter_sandbox.sandbox.backends.docker.exec_start import emptied
from jupyter_sandbox.sandbox.backends.docker.pause import pause
from jupyter_sandbox.sandbox.backends.docker.stream import stream_exec
from jupyter_sandbox.sandbox.backends.docker.unpause import unpause
from jupyter_sandbox.sandbox.backends.records import ExecResult
from jupyter_sandbox.sandbox.programs import image_programs
from jupyter_sandbox.sandbox.programs.exec_marks import new_mark
from jupyter_sandbox.sandbox.snapshots.nofollow_tar import open_directory_beneath, write_tar

# As persist.py's tar in the sandbox: numeric owners, records of 256 KiB (fewer round trips
# out of gVisor).
SEALED_TAR = image_programs.tar(
    "-c", "-b", "512", "-f", "-", "--numeric-owner", "-C", WORKSPACE_DIR, "."
)
# The archiver's whole environment: a fixed PATH of read-only directories and the C locale.
SEALED_ENVIRONMENT = {"PATH": image_programs.HOST_PATH, "LC_ALL": "C"}
# One frozen walk per container at a time: a second pause of a paused container is refused,
# and the first walk's thaw would end the second's freeze.
_FROZEN: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)


def why_not_sealed(runtime: str) -> str:
    """Why a sealed archive cannot be made for a sandbox of ``runtime`` by this server; ""
    when it can."""
    if runtime == "runsc":
        return ""
    if runtime != "runc":  # a VM's runtime (kata): /proc/<pid>/root is not the sandbox's
        return f"no sealed archive is made for runtime {runtime!r}"
    if os.geteuid() != 0:
        return (
            "under runc only a server running as root can read a frozen sandbox's /workspace "
            "itself; this one is not, so the workspace is archived inside the sandbox, where "
            "its code can forge the archive's bytes (security row 43)"
        )
    return ""


async def sealed_tar(
    engine: DockerEngine,
    container: str,
    runtime: str,
    sink: Sink,
    *,
    timeout: float,
    max_members: int,
    inspect: Inspect,
) -> ExecResult:
    """Write a tar of ``container``'s /workspace to ``sink`` in pieces, made out of the
    sandbox's reach (see the module's docstring); ``why_not_sealed(runtime)`` must be ""."""
    if runtime == "runsc":
        return await _privileged_tar(engine, container, sink, timeout=timeout, inspect=inspect)
    return await engine.run(
        f"archive the frozen workspace of {container}",
        lambda: _frozen_tar(engine, container, sink, timeout, max_members),
        timeout=timeout + 30,  # the walk's own deadline comes first
        long=True,
    )


async def _privileged_tar(
    engine: DockerEngine, container: str, sink: Sink, *, timeout: float, inspect: Inspect
) -> ExecResult:
    raw = await engine.run(
        f"inspect {container}", lambda: engine.client.api.inspect_container(container)
    )
    mark = new_mark()  # in the archiver's own environment too, so the killer finds it
    argv = image_programs.with_only_read_search(SEALED_TAR, {**SEALED_ENVIRONMENT, **mark})
    return await stream_exec(
        engine,
        container,
        argv,
        timeout=timeout,
        inspect=inspect,
        user="0",
        sink=sink,
        privileged=True,
        environment=emptied(raw["Config"].get("Env") or []),
        mark=mark,
    )


def _frozen_tar(
    engine: DockerEngine, container: str, sink: Sink, timeout: float, max_members: int
) -> ExecResult:
    """Blocking: pause ``container``, write its workspace's tar from the host, thaw it."""
    deadline = time.monotonic() + timeout
    lock = _FROZEN[container]
    if not lock.acquire(timeout=timeout):
        raise SnapshotFailedError(f"{container} was being archived for longer than {timeout:g}s")
    try:
        return _frozen_tar_locked(engine, container, sink, deadline, max_members)
    finally:
        lock.release()


def _frozen_tar_locked(
    engine: DockerEngine, container: str, sink: Sink, deadline: float, max_members: int
) -> ExecResult:
    api = engine.client.api
    pause(api, engine.exec_gate, container)  # never while an exec starts (pause.py)
    try:
        with contextlib.ExitStack() as stack:
            root = _open_root(api, container)
            stack.callback(os.close, root)
            try:
                workspace = open_directory_beneath(root, WORKSPACE_DIR)
            except OSError as exc:
                raise SnapshotFailedError(
                    f"{WORKSPACE_DIR} of {container} cannot be read ({exc.strerror or exc}): "
                    "it is a link or not a directory"
                ) from None
            stack.callback(os.close, workspace)
            write_tar(
                workspace,
                sink,
                max_members=max_members,
                max_bytes=0,  # the sink counts bytes against the cap
                deadline=deadline,
                what=f"{WORKSPACE_DIR} of {container}",
            )
    finally:
        unpause(api, container)  # always: a frozen sandbox answers nothing
    return ExecResult(0, b"", b"")


def _open_root(api: Any, container: str) -> int:
    """An fd of the paused container's root directory, as its init sees it."""
    raw = api.inspect_container(container)
    engine_state = raw.get("State") or {}  # the engine's, not the sandbox's state file
    pid = int(engine_state.get("Pid") or 0)
    if not engine_state.get("Paused") or pid <= 0:
        raise SandboxError(f"{container} is not paused, or has no process (pid {pid})")
    # O_PATH on the magic link: the host's /proc, the one link meant to be followed.
    root = os.open(f"/proc/{pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        # Opened, then checked: a frozen init cannot exit, so if this pid is the container's
        # now, the fd is its root (not a recycled pid's, nor a pid of another namespace).
        with open(f"/proc/{pid}/cgroup", encoding="ascii", errors="replace") as f:
            if raw["Id"] not in f.read():
                raise SandboxError(
                    f"process {pid} is not {container}'s: the server does not share the "
                    "engine's pid namespace"
                )
    except BaseException:
        os.close(root)
        raise
    return root
