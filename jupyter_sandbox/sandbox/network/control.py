"""Applying a network policy to a sandbox: the state record, the forwarder and the host proxy.

Who owns what (docs/architecture.md):

* the policy and the per-sandbox token live in the host-only state file (the sandbox never sees
  it, so it cannot change its own egress);
* the forwarder is started inside the sandbox through an engine exec as the sandbox starts
  (``spawn_forwarder``, whatever its policy: under none it is what tells a program that the
  policy refused it), or the first time a policy allows network, and lives as long as the
  sandbox;
* the host proxy process (``python -m jupyter_sandbox.sandbox.network``) is started detached
  when a policy allows network and stopped when the policy becomes ``none``; removal of the
  sandbox stops it (``stop_proxy`` in ``SandboxStarter.discard``), and it exits by itself
  within a second once the sandbox's directory is gone, so a stray cannot outlive its sandbox.

Switching between allowlists, or to ``open``, only rewrites the state file: the running proxy
reads the policy on every request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import time
from pathlib import Path
from typing import Any, Final

from jupyter_sandbox.protocol.errors import NetworkSetupError, ProcessNotFoundError
from jupyter_sandbox.sandbox.backends.base import SANDBOX_IO_DIR, SandboxBackend
from jupyter_sandbox.sandbox.host.helper_process import reap, start_helper_async
from jupyter_sandbox.sandbox.host.process_lock import ProcessLock
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.network.forwarder import CONFIG_VARIABLE
from jupyter_sandbox.sandbox.network.policy import NetworkPolicy, policy_of_state
from jupyter_sandbox.sandbox.network.settings import FORWARDER_PORT
from jupyter_sandbox.sandbox.programs import image_programs
from jupyter_sandbox.sandbox.programs.inside_listener import last_line, wait_until_listening

TUNNEL_SOCKET = "egress.sock"
PROXY_LOCK = "egress-proxy.lock"
PROXY_LOG = "egress-proxy.log"
FORWARDER_SPAWN: Final = "forwarder_spawn"  # state key: the engine's id of the forwarder's process
START_TIMEOUT = 30.0
STOP_TIMEOUT = 3.0


async def apply_policy(
    backend: SandboxBackend,
    directory: SandboxDirectory,
    sandbox_id: str,
    policy: NetworkPolicy,
    proxy_options: dict[str, Any],
) -> NetworkPolicy:
    """Make ``policy`` the sandbox's, now. On failure the previous policy is put back."""
    state = directory.read_state()
    previous = policy_of_state(state)
    token = state.get("network_token") or secrets.token_urlsafe(24)
    directory.update_state(network=policy.as_dict(), network_token=token)
    try:
        if policy.allows_network:
            await start_forwarder(backend, directory, sandbox_id)
            await start_proxy(directory, proxy_options)
        else:
            await asyncio.to_thread(stop_proxy, directory)
    except BaseException:
        directory.update_state(network=previous.as_dict())
        if not previous.allows_network:
            await asyncio.shield(asyncio.to_thread(stop_proxy, directory))
        raise
    return policy


def forwarder_source() -> str:
    """The forwarder program (forwarder.py), for ``python -c``."""
    return (Path(__file__).parent / "forwarder.py").read_text()


def forwarder_environment(
    token: str, port: int = FORWARDER_PORT, path: str = f"{SANDBOX_IO_DIR}/{TUNNEL_SOCKET}"
) -> dict[str, str]:
    config = {"token": token, "port": port, "path": path}
    return {CONFIG_VARIABLE: json.dumps(config)}


async def spawn_forwarder(
    backend: SandboxBackend, directory: SandboxDirectory, sandbox_id: str
) -> str:
    """Start the forwarder inside the sandbox, unless it was started before, without waiting
    for it to listen; the engine's id of its process.

    Started with every sandbox, whatever its policy: under none no host proxy attaches, and
    the forwarder answers each request with a 403 naming the policy (forwarder.py), where a
    dead port would only say "connection refused". Not waited for, so a kernel start does not
    pay for it; ``start_forwarder`` waits for it when a policy allows network. The token it
    greets the host proxy with is made now and kept in the host-only state file.
    """
    state = directory.read_state()
    spawned = state.get(FORWARDER_SPAWN)
    if isinstance(spawned, str) and spawned:
        return spawned
    token = state.get("network_token")
    if not isinstance(token, str) or not token:
        token = secrets.token_urlsafe(24)
        directory.update_state(network_token=token)
    spawn_id = await backend.spawn(
        sandbox_id,
        image_programs.python(forwarder_source()),
        environment=forwarder_environment(token),
    )
    directory.update_state(forwarder_spawn=spawn_id)
    return spawn_id


async def start_forwarder(
    backend: SandboxBackend, directory: SandboxDirectory, sandbox_id: str
) -> None:
    """Start the forwarder inside the sandbox, unless it was started before, and wait until it
    listens."""
    socket_path = directory.io / TUNNEL_SOCKET
    if socket_path.exists() or socket_path.is_symlink():
        return  # started before (gVisor could not bind the path a second time anyway)
    spawn_id = await spawn_forwarder(backend, directory, sandbox_id)
    try:
        ended = await backend.spawned_exit_code(spawn_id) is not None
    except ProcessNotFoundError:
        ended = True
    if ended:  # the one started with the sandbox is gone (its code may have ended it)
        directory.update_state(forwarder_spawn=None)
        spawn_id = await spawn_forwarder(backend, directory, sandbox_id)
    await wait_until_listening(
        backend,
        sandbox_id,
        spawn_id,
        socket_path,
        what="network forwarder",
        error=NetworkSetupError,
    )


def proxy_running(directory: SandboxDirectory) -> bool:
    return ProcessLock.is_held(directory.root / PROXY_LOCK)


async def start_proxy(directory: SandboxDirectory, options: dict[str, Any]) -> None:
    """Start the sandbox's host proxy and wait until it is ready.

    The wait is on the event loop, not on a thread: the proxy is ready once a tunnel through
    the sandbox's forwarder opens, and the sandbox's own code can stop its forwarder. On a
    thread, each such sandbox's policy change would hold one of the default pool's few threads
    for the whole wait, and every owner's host work (removals, starts) would queue behind it.
    """
    if proxy_running(directory):
        return
    child, line = await start_helper_async(
        "jupyter_sandbox.sandbox.network",
        [str(directory.root), json.dumps(options)],
        directory.root / PROXY_LOG,
        START_TIMEOUT,
    )
    if not line.startswith("ready"):
        with contextlib.suppress(ProcessLookupError):
            child.kill()
        tail = last_line(directory.root / PROXY_LOG)
        raise NetworkSetupError(
            f"the host network proxy of sandbox {directory.root.name} did not start: "
            f"{line or 'no answer'}{'; ' + tail if tail else ''}"
        )


def stop_proxy(directory: SandboxDirectory) -> None:
    """End the sandbox's host proxy, if one runs, and return once it has exited (blocking; a
    fraction of a second)."""
    lock = ProcessLock(directory.root / PROXY_LOCK)
    if not ProcessLock.is_held(lock.path):
        return
    note = lock.note_of_holder()
    if not note.isdigit():
        return
    pid = int(note)
    for signum in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
        deadline = time.monotonic() + STOP_TIMEOUT
        while time.monotonic() < deadline:
            if not ProcessLock.is_held(lock.path) and _exited(pid):
                return
            time.sleep(0.01)


def _exited(pid: int) -> bool:
    """Whether ``pid`` has ended (a zombie has: only its parent's wait is missing)."""
    reap()
    try:
        with open(f"/proc/{pid}/status") as f:
            return "\nState:\tZ" in f.read()
    except FileNotFoundError:
        return True
