"""Kernels started with no server are forked by the headless warm pool's zygote.

The keeper (sandbox/lifecycle/pool_keeper.py) runs a zygote at a fixed place in the default
state directory (sandbox_env.py's ``default_place``); the kernelspec's launcher of this checkout
(kernelspec/sandboxed-python/launch.py, not the copy installed in the virtualenv) finds it with
``JUPYTER_SANDBOX_ZYGOTE`` unset, as under nbconvert, and falls back to a plain start when the
socket is stale.
"""

from __future__ import annotations

import asyncio
import getpass
import os
import queue
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

from jupyter_sandbox.sandbox.host.process_lock import ProcessLock
from jupyter_sandbox.sandbox.host.zygote_process import headless_socket
from jupyter_sandbox.sandbox.lifecycle.pool_keeper import stop_keeper
from jupyter_sandbox.sandbox.settings import SandboxSettings
from jupyter_sandbox.server_extension.fast_start import ZYGOTE_ENV
from tests.conftest import BOTH_RUNTIMES
from tests.kernel.kernels import is_input_of, run, running_kernel, value_after_error, value_of
from tests.kernel.sandbox_env import containers_under, notebook_dir, sandbox_kernel_env
from tests.kernel.test_lifetimes import (
    GONE_SECONDS,
    kill_client,
    process_ended,
    start_client,
    wait_until,
)
from tests.kernel.test_zygote import LAUNCHER, children_of, launcher_module, wait_gone

INTERRUPT_TRIES = 6
INTERRUPT_SECONDS = 5.0
ZYGOTE_SECONDS = 120.0  # the keeper starts once the first kernel's sandbox answers (runsc: s)


def checkout_kernelspec() -> tuple[str, KernelSpecManager]:
    """sandboxed-python as this checkout has it: its launcher, not the virtualenv's copy."""
    return "sandboxed-python", KernelSpecManager(kernel_dirs=[str(LAUNCHER.parents[1])])


def zygote_pid(state_dir: Path) -> int:
    """The headless zygote's pid, once it listens (its keeper's pid is in the lock beside it)."""
    path = headless_socket(state_dir)
    lock = ProcessLock(path.with_name("headless.lock"))
    deadline = time.monotonic() + ZYGOTE_SECONDS
    while time.monotonic() < deadline:
        note = lock.note_of_holder()
        if path.exists() and note.isdigit():
            zygotes = [
                pid
                for pid in children_of(int(note))
                if b"jupyter_sandbox.kernel.zygote" in Path(f"/proc/{pid}/cmdline").read_bytes()
            ]
            if zygotes:
                return zygotes[0]
        time.sleep(0.2)
    raise AssertionError(f"no headless zygote at {path} within {ZYGOTE_SECONDS:g}s")


def forked_kernel_lifecycle(state_dir: Path, runtime: str) -> int:
    """A kernel's start, interrupt, restart and shutdown through jupyter_client while the
    zygote listens; the zygote's pid."""
    kernelspec = checkout_kernelspec()
    cwd = notebook_dir(state_dir)
    with running_kernel(cwd, kernelspec=kernelspec, JUPYTER_SANDBOX_RUNTIME=runtime) as (_, kc):
        assert value_of(kc, "6 * 7") == "42"  # the first kernel: it starts the keeper
    zygote = zygote_pid(state_dir)
    assert headless_socket(state_dir).stat().st_mode & 0o777 == 0o600
    assert headless_socket(state_dir).parent.stat().st_mode & 0o777 == 0o700

    with running_kernel(cwd, kernelspec=kernelspec, JUPYTER_SANDBOX_RUNTIME=runtime) as (km, kc):
        [forked] = children_of(zygote)  # forked by the zygote, not exec'd by the launcher
        assert forked != km.provisioner.process.pid  # the launcher stands in for it
        run(kc, "x = 41")
        assert value_of(kc, "x + 1") == "42"

        msg_id = kc.execute("import time; time.sleep(1000)")
        while not is_input_of(kc.get_iopub_msg(timeout=30), msg_id):
            pass
        reply = interrupted(km, kc)
        assert reply["parent_header"]["msg_id"] == msg_id
        assert reply["content"]["ename"] == "KeyboardInterrupt"
        assert value_after_error(kc, "x") == "41"

        km.restart_kernel(now=False)  # a new launcher, so a new fork
        kc.wait_for_ready(timeout=120)
        assert wait_gone(forked)
        [forked] = children_of(zygote)
        assert value_of(kc, "'x' in globals()") == "False"
    # running_kernel shut it down through jupyter_client
    assert wait_gone(forked)
    return zygote


def interrupted(km: KernelManager, kc: BlockingKernelClient) -> dict[str, Any]:
    """The reply of the running cell, interrupted through jupyter_client: again every few
    seconds, since an interrupt that reaches the kernel as the cell begins can be lost."""
    for _ in range(INTERRUPT_TRIES):
        km.interrupt_kernel()
        try:
            reply: dict[str, Any] = kc.get_shell_msg(timeout=INTERRUPT_SECONDS)
            return reply
        except queue.Empty:
            continue
    raise AssertionError(f"no reply after {INTERRUPT_TRIES} interrupts")


@pytest.mark.integration
@pytest.mark.parametrize("runtime", BOTH_RUNTIMES)
async def test_a_headless_kernel_is_forked_by_the_keepers_zygote_and_it_ends_with_the_keeper(
    purpose: str, runtime: str
) -> None:
    with sandbox_kernel_env(purpose, headless_pool=True, default_place=True) as state_dir:
        zygote = await asyncio.to_thread(forked_kernel_lifecycle, state_dir, runtime)

        assert stop_keeper(state_dir, getpass.getuser())
        assert wait_gone(zygote)
        assert not headless_socket(state_dir).exists()
        assert containers_under(state_dir) == []


@pytest.mark.integration
@pytest.mark.runc
def test_with_a_stale_socket_a_headless_kernel_starts_the_ordinary_way(purpose: str) -> None:
    with sandbox_kernel_env(purpose, default_place=True) as state_dir:
        stale = stale_socket(headless_socket(state_dir))
        log = state_dir.with_name("launcher.log")
        with (
            open(log, "w") as stderr,
            running_kernel(
                notebook_dir(state_dir),
                stderr=stderr,
                kernelspec=checkout_kernelspec(),
                JUPYTER_SANDBOX_RUNTIME="runc",
            ) as (km, kc),
        ):
            assert value_of(kc, "6 * 7") == "42"
            launcher = km.provisioner.process.pid
            cmdline = Path(f"/proc/{launcher}/cmdline").read_bytes().split(b"\0")
            assert b"jupyter_sandbox.kernel" in cmdline  # exec'd in place: the proxy itself
        assert f"no zygote at {stale}" in log.read_text()
        assert containers_under(state_dir) == []


@pytest.mark.integration
@pytest.mark.runc
@pytest.mark.checklist(
    row=67,
    attack="the process that started a kernel which the headless pool's zygote forked (so the "
    "client is no ancestor of the kernel) is killed with SIGKILL",
    expected="the forked kernel and its launcher exit within 10 s, as an exec'd kernel does",
)
def test_a_killed_client_takes_its_forked_kernel_and_launcher(
    purpose: str, observe: Callable[..., None]
) -> None:
    with sandbox_kernel_env(purpose, headless_pool=True, default_place=True) as state_dir:
        kernels = checkout_jupyter_path(state_dir)
        with running_kernel(
            notebook_dir(state_dir),
            kernelspec=checkout_kernelspec(),
            JUPYTER_SANDBOX_RUNTIME="runc",
        ) as (_, kc):
            assert value_of(kc, "6 * 7") == "42"  # the first kernel: it starts the keeper
        zygote = zygote_pid(state_dir)
        client, launcher = start_client(state_dir, "runc", JUPYTER_PATH=kernels)
        [forked] = children_of(zygote)
        assert forked != launcher
        kill_client(client)
        took = wait_until(lambda: process_ended(forked) and process_ended(launcher), GONE_SECONDS)
        assert stop_keeper(state_dir, getpass.getuser())
    observe(f"the forked kernel and its launcher exited {took:.1f}s after the client's SIGKILL")


def checkout_jupyter_path(state_dir: Path) -> str:
    """A JUPYTER_PATH entry whose sandboxed-python is this checkout's (beside the state
    directory, removed with it): for a client process, which finds kernelspecs there first."""
    kernels = state_dir.with_name("jupyter-path") / "kernels"
    kernels.mkdir(parents=True)
    (kernels / "sandboxed-python").symlink_to(LAUNCHER.parent)
    return str(kernels.parent)


# -- without the engine ---------------------------------------------------------------------


def stale_socket(path: Path) -> Path:
    """A socket file nobody listens on, as a killed zygote leaves."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(path))
    return path


@pytest.mark.parametrize(
    "variables",
    [
        {},
        {"XDG_DATA_HOME": "/srv/xdg"},
        {"JUPYTER_DATA_DIR": "/srv/data", "XDG_DATA_HOME": "/srv/xdg"},
        {"JUPYTER_RUNTIME_DIR": "/srv/runtime", "JUPYTER_DATA_DIR": "/srv/data"},
    ],
    ids=["home", "xdg", "data-dir", "runtime-dir"],
)
def test_the_launcher_looks_where_the_keeper_listens_in_the_default_state_dir(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str]
) -> None:
    for name in ("JUPYTER_RUNTIME_DIR", "JUPYTER_DATA_DIR", "XDG_DATA_HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    expected = headless_socket(Path(SandboxSettings().state_dir))
    assert launcher_module().headless_zygote() == str(expected)
    assert launcher_module().headless_zygote(dict(os.environ)) == str(expected)


def test_a_stale_headless_socket_makes_the_launcher_start_the_kernel_itself(
    tmp_path: Path,
) -> None:
    stale = stale_socket(tmp_path / "sandboxes" / "zygote" / "headless.sock")
    env = {name: value for name, value in os.environ.items() if name != ZYGOTE_ENV}
    env["JUPYTER_RUNTIME_DIR"] = str(tmp_path)
    missing = tmp_path / "missing.json"
    argv = [sys.executable, "-I", "-S", str(LAUNCHER), "-f", str(missing)]
    done = subprocess.run(argv, env=env, capture_output=True, timeout=60, check=False)
    assert f"no zygote at {stale}".encode() in done.stderr
    assert done.returncode != 0
    assert str(missing).encode() in done.stderr.split(b"no zygote at", 1)[1]  # the proxy's


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to listen as another user")
def test_the_launcher_sends_nothing_to_a_zygote_of_another_user(tmp_path: Path) -> None:
    path = tmp_path / "other.sock"
    ready_read, ready_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child: listens as nobody, accepts, reads, exits
        try:
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(str(path))
            os.setuid(65534)  # the peer credentials a connection sees are taken at listen()
            listener.listen(1)
            os.write(ready_write, b"x")
            conn, _ = listener.accept()
            conn.settimeout(10)
            received = conn.recv(1 << 16)
            os._exit(3 if received else 0)
        finally:
            os._exit(4)
    os.close(ready_write)
    try:
        assert os.read(ready_read, 1) == b"x"
        connection_file = tmp_path / "kernel.json"
        connection_file.write_text("{}")
        handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
        try:  # the launcher takes over both signals to forward them: not pytest's for long
            launcher = launcher_module().Launcher()
            assert launcher.run_in_zygote(str(path), str(connection_file)) is None
        finally:
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
    finally:
        os.close(ready_read)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0  # it got no request: not even the environment
