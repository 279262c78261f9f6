"""No sandbox outlives what started it, with no server running (issue 38).

Kernels are started by a real jupyter_client KernelManager, in this process or in a client
process the test kills, and ended with real signals. An unnamed kernel's sandbox goes with its
kernel process however that ends (lifeline.py, kernel/parent_watch.py); a named context stays
and is reattachable. The bounds are the issue's; the measured times are in
benchmarks/lifetimes.py.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from jupyter_client.manager import KernelManager

from jupyter_sandbox.client import SandboxClient, SandboxConnectionError
from jupyter_sandbox.sandbox import labels
from jupyter_sandbox.sandbox.lifecycle.lifeline import GRACE_SECONDS
from tests.kernel.kernels import run, running_kernel, value_of
from tests.kernel.sandbox_env import containers_under, notebook_dir, sandbox_kernel_env
from tests.kernel.test_jupyter_server import Server, kernel_container, start_server

pytestmark = pytest.mark.integration

LIFELINE = b"jupyter_sandbox.sandbox.lifecycle.lifeline"  # its module, on its command line
GONE_SECONDS = 10.0  # the bound for a kernel's sandbox and a client's kernel
EMPTY_NOTEBOOK = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
SESSION = {"path": "t.ipynb", "type": "notebook", "kernel": {"name": "sandboxed-python"}}


@pytest.fixture
def env(purpose: str) -> Iterator[Path]:
    with sandbox_kernel_env(purpose) as state_dir:
        yield state_dir


def wait_until(condition: Callable[[], bool], seconds: float) -> float:
    """Seconds until ``condition`` held; fails past ``seconds``."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > seconds:
            raise AssertionError(f"not within {seconds}s")
        time.sleep(0.1)
    return time.monotonic() - started


def process_ended(pid: int) -> bool:
    """Whether ``pid`` is gone (or a zombie nobody has reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state == b"Z"


def lifelines_under(state_dir: Path) -> list[int]:
    """The pids of the lifelines (sandbox/lifecycle/lifeline.py) of kernels under
    ``state_dir``, read off their command lines."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:  # ended meanwhile
            continue
        if LIFELINE in cmdline and str(state_dir).encode() in cmdline:
            found.append(int(entry.name))
    return found


def started_kernel(env: Path, runtime: str, **kernel_env: str) -> KernelManager:
    km = KernelManager(kernel_name="sandboxed-python")
    km.start_kernel(
        cwd=str(notebook_dir(env)),
        env={**os.environ, "JUPYTER_SANDBOX_RUNTIME": runtime, **kernel_env},
    )
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=120)
    finally:
        kc.stop_channels()
    assert len(containers_under(env)) == 1
    return km


@pytest.mark.checklist(
    row=65,
    attack="shutdown_kernel(now=True): the kernel process is killed with SIGKILL, no shutdown",
    expected="the unnamed kernel's sandbox is removed within 10 s, with no server running",
)
def test_shutdown_now_leaves_no_container(
    env: Path, runtime: str, observe: Callable[..., None]
) -> None:
    km = started_kernel(env, runtime)
    try:
        km.shutdown_kernel(now=True)
        took = wait_until(lambda: containers_under(env) == [], GONE_SECONDS)
    finally:
        km.cleanup_resources()
    observe(f"the sandbox was gone {took:.1f}s after shutdown_kernel(now=True)")


@pytest.mark.checklist(
    row=66,
    attack="the proxy kernel process is sent SIGKILL or SIGTERM by someone else than its client",
    expected="its unnamed sandbox is removed: at once on SIGTERM; on SIGKILL once no new process "
    "of the kernel took it over within the lifeline's grace (10 s), with no server running",
)
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_kernel_process_takes_its_sandbox(
    env: Path, runtime: str, signum: signal.Signals, observe: Callable[..., None]
) -> None:
    km = started_kernel(env, runtime)
    try:
        assert km.provisioner is not None
        os.kill(km.provisioner.pid, signum)  # type: ignore[attr-defined]
        km.provisioner.process.wait(timeout=GONE_SECONDS)  # type: ignore[attr-defined]
        # Its client keeps the connection file: a restart may still come, and is waited for;
        # the removal then starts a Python process and asks the engine, slow on a loaded host.
        bound = GONE_SECONDS + (GRACE_SECONDS + 20 if signum == signal.SIGKILL else 0)
        took = wait_until(lambda: containers_under(env) == [], bound)
    finally:
        km.cleanup_resources()
    observe(f"{signum.name}: the sandbox was gone {took:.1f}s after the signal")


def test_a_kernel_restarted_after_a_kill_keeps_its_sandbox(env: Path, runtime: str) -> None:
    """restart_kernel(now=True) kills the process and starts the next at once: that process
    takes the sandbox over before the killed one's lifeline would remove it."""
    with running_kernel(notebook_dir(env), JUPYTER_SANDBOX_RUNTIME=runtime) as (km, kc):
        run(kc, "open('/workspace/kept.txt', 'w').write('kept')")
        [before] = [c.name for c in containers_under(env)]
        [lifeline] = lifelines_under(env)
        km.restart_kernel(now=True)
        kc.wait_for_ready(timeout=120)
        # The killed process's lifeline ends once it has decided: at once when the next process
        # has taken the context over, after removing the sandbox when none did within its grace.
        wait_until(lambda: process_ended(lifeline), GRACE_SECONDS + 20)
        assert value_of(kc, "open('/workspace/kept.txt').read()") == "'kept'"
        assert [c.name for c in containers_under(env)] == [before]


# The client: starts a kernel with jupyter_client, says where it is, then waits to be killed.
CLIENT = """
import json, os, sys
from jupyter_client.manager import KernelManager
km = KernelManager(kernel_name="sandboxed-python")
km.start_kernel(cwd=sys.argv[1], env=dict(os.environ))
kc = km.client()
kc.start_channels()
kc.wait_for_ready(timeout=120)
kc.execute_interactive("x = 'survives'", timeout=60)
print(json.dumps({"kernel_pid": km.provisioner.pid}), flush=True)
sys.stdin.read()
"""


def start_client(env: Path, runtime: str, **kernel_env: str) -> tuple[subprocess.Popen[str], int]:
    """A client process with a ready kernel; the kernel's pid."""
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT, str(notebook_dir(env))],
        env={**os.environ, "JUPYTER_SANDBOX_RUNTIME": runtime, **kernel_env},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert client.stdout is not None
    line = client.stdout.readline()
    assert line, "the client did not start its kernel"
    return client, int(json.loads(line)["kernel_pid"])


def kill_client(client: subprocess.Popen[str]) -> None:
    client.kill()
    client.wait(timeout=10)
    assert client.stdin is not None
    assert client.stdout is not None
    client.stdin.close()
    client.stdout.close()


@pytest.mark.checklist(
    row=67,
    attack="the process that started a kernel (agent code, a test run) is killed with SIGKILL",
    expected="its kernel process exits and the unnamed sandbox is removed within 10 s",
)
def test_a_killed_client_takes_its_kernel_and_sandbox(
    env: Path, runtime: str, observe: Callable[..., None]
) -> None:
    client, kernel_pid = start_client(env, runtime)
    try:
        assert len(containers_under(env)) == 1
    finally:
        kill_client(client)
    kernel_took = wait_until(lambda: process_ended(kernel_pid), GONE_SECONDS)
    sandbox_took = wait_until(lambda: containers_under(env) == [], GONE_SECONDS)
    observe(
        f"the kernel process exited {kernel_took:.1f}s and its sandbox was gone "
        f"{sandbox_took:.1f}s after the client's SIGKILL"
    )


@pytest.mark.checklist(
    row=67,
    attack="the process that started a kernel of a named context is killed with SIGKILL",
    expected="the kernel process exits; the context's sandbox stays and a new kernel reattaches",
)
def test_a_killed_clients_named_context_survives(
    env: Path, runtime: str, observe: Callable[..., None]
) -> None:
    client, kernel_pid = start_client(env, runtime, JUPYTER_SANDBOX_CONTEXT="lives-on")
    kill_client(client)
    wait_until(lambda: process_ended(kernel_pid), GONE_SECONDS)
    [kept] = [c.name for c in containers_under(env)]
    with running_kernel(
        notebook_dir(env), JUPYTER_SANDBOX_CONTEXT="lives-on", JUPYTER_SANDBOX_RUNTIME=runtime
    ) as (_, kc):
        assert value_of(kc, "x") == "'survives'"
        assert [c.name for c in containers_under(env)] == [kept]
    observe("the kernel exited; a new kernel of the context found x == 'survives'")


def pool_tickets(state_dir: Path) -> list[str]:
    """The sandbox ids of the warm pool's waiting members (pool/<key>/<id>)."""
    pool = state_dir / "pool"
    return sorted(path.name for path in pool.glob("*/*") if path.parent.name != "wanted")


@pytest.mark.checklist(
    row=68,
    attack="the Jupyter server is killed with SIGKILL while a notebook's kernel (a zygote's "
    "child) runs in a sandbox and its warm pool holds a member",
    expected="the kernel ends with the server, its client, and its unnamed sandbox is removed "
    "within 10 s; the next start of anything (here a kernel, no server) removes the member in 30 s",
)
def test_a_killed_server_takes_its_kernels_and_the_next_start_its_pool(
    purpose: str, runtime: str, tmp_path: Path, observe: Callable[..., None]
) -> None:
    with sandbox_kernel_env(purpose, runtime=runtime) as state_dir:
        root = notebook_dir(state_dir)
        (root / "t.ipynb").write_text(json.dumps(EMPTY_NOTEBOOK))
        server = start_server(root, tmp_path)
        try:
            wait_until(lambda: bool(pool_tickets(state_dir)), 120)
            members = pool_tickets(state_dir)
            session = json.loads(asyncio.run(server.request("POST", "/api/sessions", SESSION)).body)
            kernel_id = session["kernel"]["id"]
            wait_until(lambda: kernel_container(state_dir, kernel_id) is not None, 120)
            kernel_sandbox = kernel_container(state_dir, kernel_id).name
        finally:
            os.killpg(server.process.pid, signal.SIGKILL)
            server.process.wait(timeout=10)
        kernel_took = wait_until(
            lambda: kernel_sandbox not in {c.name for c in containers_under(state_dir)},
            GONE_SECONDS,
        )
        names = {labels.container_name(member) for member in members} - {kernel_sandbox}
        assert names <= {c.name for c in containers_under(state_dir)}  # nothing removed them yet
        # Started elsewhere, so that its request is not the pool's and it claims no member.
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        with running_kernel(elsewhere, JUPYTER_SANDBOX_RUNTIME=runtime):
            pool_took = wait_until(
                lambda: not names & {c.name for c in containers_under(state_dir)}, 30
            )
        assert pool_tickets(state_dir) == []
    observe(
        f"the notebook kernel's sandbox was gone {kernel_took:.1f}s after the server's SIGKILL; "
        f"{len(names)} pool member(s) {pool_took:.1f}s after the next kernel's start"
    )


CLIENT_TIMEOUT = 5.0  # seconds of life the Python client asks for its sandbox


def ready_client(server: Server) -> SandboxClient:
    """A Python client of ``server`` once it answers (a server's start takes seconds)."""
    client = SandboxClient(server.base, server.token)
    deadline = time.monotonic() + 120
    while True:
        try:
            client.list()
            return client
        except SandboxConnectionError:
            if time.monotonic() > deadline or server.process.poll() is not None:
                raise
            time.sleep(0.5)


@pytest.mark.checklist(
    row=70,
    attack="a sandbox is made through the Python client (REST) with a timeout, and the server "
    "that would have culled it at that timeout is killed with SIGKILL",
    expected="once the timeout has passed, `jupyter sandbox list` marks it an orphan and the next "
    "start of anything (here a kernel, no server) removes it within 30 s",
)
def test_a_client_made_sandbox_goes_after_its_timeout_with_its_server_killed(
    purpose: str, runtime: str, tmp_path: Path, observe: Callable[..., None]
) -> None:
    with sandbox_kernel_env(purpose, runtime=runtime) as state_dir:
        server = start_server(notebook_dir(state_dir), tmp_path)
        try:
            sandbox = ready_client(server).create(runtime=runtime, timeout=CLIENT_TIMEOUT)
        finally:
            os.killpg(server.process.pid, signal.SIGKILL)
            server.process.wait(timeout=10)
        name = labels.container_name(sandbox.id)
        expires = datetime.datetime.fromisoformat(sandbox.info["expires"])
        # Nothing ends it at its timeout with the server gone ...
        time.sleep(max((expires - datetime.datetime.now(expires.tzinfo)).total_seconds(), 0) + 1)
        assert name in {c.name for c in containers_under(state_dir)}
        listing = subprocess.run(
            [
                sys.executable,
                "-m",
                "jupyter_sandbox.cli",
                "list",
                f"--owner={sandbox.info['owner']}",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        [row] = [line for line in listing.stdout.splitlines() if line.startswith(sandbox.id)]
        assert "(orphan: past its timeout" in row
        # ... until something starts: here a kernel, started elsewhere so that it claims no
        # member of the killed server's warm pool.
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        with running_kernel(elsewhere, JUPYTER_SANDBOX_RUNTIME=runtime):
            took = wait_until(lambda: name not in {c.name for c in containers_under(state_dir)}, 30)
    observe(f"gone {took:.1f}s after the next kernel's start, past its {CLIENT_TIMEOUT:g}s timeout")
