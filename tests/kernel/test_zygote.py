"""Kernels forked by the zygote through the kernelspec's launcher, and the launcher without one.

The launcher is started as jupyter_client starts it (its own session, the kernelspec's argv);
the zygote as the server extension starts it (fast_start.Zygote), with this process as its
server. Every kernel runs under runc with a private state directory (sandbox_env.py). The
notebook's directory and the zygote's working directory hold modules a user could leave there
(tests/shadowing.py): neither the zygote, nor a kernel it forks, nor the launcher imports them.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.connect import write_connection_file

from jupyter_sandbox.kernel.zygote import Refused, validate
from jupyter_sandbox.sandbox.lifecycle.contexts import ContextLock, lock_path
from jupyter_sandbox.sandbox.manager import default_owner
from jupyter_sandbox.server_extension.fast_start import ZYGOTE_ENV, Zygote
from tests.kernel.kernels import run, value_after_error, value_of
from tests.kernel.sandbox_env import containers_under, notebook_dir, sandbox_kernel_env
from tests.shadowing import imported, plant

LAUNCHER = Path(__file__).parents[2] / "kernelspec" / "sandboxed-python" / "launch.py"


@pytest.fixture
def env(purpose: str) -> Iterator[Path]:
    with sandbox_kernel_env(purpose, runtime="runc") as state_dir:
        yield state_dir


@pytest.fixture
def zygote(env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Zygote, Path]]:
    """A running zygote whose log is the returned file, started in a working directory holding
    shadowing modules, as a server's may; stopped (and checked gone) at the end."""
    log_path = env.with_name(env.name + "-zygote.log")
    server_dir = env.with_name(env.name + "-server")
    server_dir.mkdir()
    with open(log_path, "wb") as log, monkeypatch.context() as patch:
        patch.chdir(plant(server_dir))
        zygote = Zygote(env)
        assert zygote.start(stderr=log)
    try:
        assert asyncio.run(zygote.wait_ready()), log_path.read_text()
        yield zygote, log_path
    finally:
        process = zygote.process
        asyncio.run(zygote.stop())
        assert process is not None
        assert process.poll() is not None
        assert not zygote.path.exists()
        assert ZYGOTE_ENV not in os.environ
        log_path.unlink()
        found = imported(server_dir)
        shutil.rmtree(server_dir)
        assert found is None


def launcher_module() -> ModuleType:
    """The kernelspec's launcher, imported from this checkout (it is no module of the package)."""
    spec = importlib.util.spec_from_file_location("sandboxed_python_launch", LAUNCHER)
    assert spec is not None
    assert spec.loader is not None
    launcher = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launcher)
    return launcher


def launch(state_dir: Path, **env: str) -> tuple[subprocess.Popen[bytes], str]:
    """The kernelspec's command on a fresh connection file, as jupyter_client runs it, in the
    notebook's directory, where shadowing modules lie (check :func:`imported` on it)."""
    if not (notebook_dir(state_dir) / "json.py").exists():
        plant(notebook_dir(state_dir))
    connection_file, _ = write_connection_file(
        str(state_dir / f"kernel-{time.monotonic_ns()}.json"),  # removed with the state dir
        key=secrets.token_hex(16).encode(),
    )
    argv = [sys.executable, "-I", "-S", str(LAUNCHER), "-f", connection_file]
    process = subprocess.Popen(
        argv,
        cwd=notebook_dir(state_dir),
        env={**os.environ, **env},
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    return process, connection_file


def client(connection_file: str, process: subprocess.Popen[bytes]) -> BlockingKernelClient:
    kc = BlockingKernelClient(connection_file=connection_file)
    kc.load_connection_file()
    kc.start_channels()
    deadline = time.monotonic() + 120
    while True:
        try:
            kc.wait_for_ready(timeout=deadline - time.monotonic())
            return kc
        except RuntimeError:
            # Without a kernel manager, a client takes a kernel whose heartbeat has not beaten
            # yet (it is still importing) for dead; the process says whether it is.
            if process.poll() is not None or time.monotonic() > deadline:
                raise


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def command_line(pid: int) -> list[bytes]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")


def wait_gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists():
            return True
        time.sleep(0.05)
    return False


# -- with the engine ------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.runc
def test_a_forked_kernel_works_and_its_exit_code_reaches_the_launcher(
    env: Path, zygote: tuple[Zygote, Path]
) -> None:
    server, _ = zygote
    assert server.process is not None
    process, connection_file = launch(env, **{ZYGOTE_ENV: str(server.path)})
    kc = client(connection_file, process)
    try:
        [kernel] = children_of(server.process.pid)  # forked, not exec'd by the launcher
        run(kc, "x = 41")
        msg_id = kc.execute("import time; time.sleep(1000)")
        time.sleep(1)
        interrupt = kc.session.msg("interrupt_request", {})
        kc.control_channel.send(interrupt)  # interrupt_mode "message", as jupyter_client does
        reply = kc.get_shell_msg(timeout=10)
        assert reply["parent_header"]["msg_id"] == msg_id
        assert reply["content"]["ename"] == "KeyboardInterrupt"
        assert value_after_error(kc, "x + 1") == "42"
        assert value_of(kc, "__import__('os').getcwd()") == "'/workspace'"
        assert imported(notebook_dir(env)) is None
        kc.shutdown(restart=True)  # a fresh interpreter; this kernel process exits 0
        assert process.wait(timeout=30) == 0
        assert wait_gone(kernel)

        process, _ = launch_again(env, connection_file, server)
        kc.wait_for_ready(timeout=120)
        assert value_of(kc, "'x' in globals()") == "False"
        kc.shutdown()
        assert process.wait(timeout=60) == 0
    finally:
        kc.stop_channels()
        if process.poll() is None:
            process.kill()
    assert containers_under(env) == []  # an unnamed kernel's sandbox goes with its shutdown

    broken = env.with_name(env.name + "-broken.json")
    broken.write_text("not json")
    argv = [sys.executable, "-I", "-S", str(LAUNCHER), "-f", str(broken)]
    failed = subprocess.run(argv, env={**os.environ, ZYGOTE_ENV: str(server.path)}, check=False)
    broken.unlink()
    assert failed.returncode == 1  # the proxy's own failure, through the launcher


def launch_again(
    state_dir: Path, connection_file: str, server: Zygote
) -> tuple[subprocess.Popen[bytes], str]:
    """What jupyter_client's restart does: the same command on the same connection file."""
    argv = [sys.executable, "-I", "-S", str(LAUNCHER), "-f", connection_file]
    process = subprocess.Popen(
        argv,
        cwd=notebook_dir(state_dir),
        env={**os.environ, ZYGOTE_ENV: str(server.path)},
        start_new_session=True,
    )
    return process, connection_file


@pytest.mark.integration
@pytest.mark.runc
def test_without_a_zygote_the_launcher_becomes_the_proxy(env: Path) -> None:
    missing = str(env / "zygote" / "none.sock")
    process, connection_file = launch(env, **{ZYGOTE_ENV: missing})
    kc = client(connection_file, process)
    try:
        # exec'd in place: the same pid is the proxy, whose children are its lifeline and the
        # refresher of its copy-on-write /workspace (sandbox/workspace/refresh.py)
        kinds = sorted(
            "lifeline"
            if b"jupyter_sandbox.sandbox.lifecycle.lifeline" in command_line(pid)
            else "refresher"
            if b"jupyter_sandbox.sandbox.workspace.refresh" in command_line(pid)
            else command_line(pid).decode(errors="replace")
            for pid in children_of(process.pid)
        )
        assert kinds in (["lifeline"], ["lifeline", "refresher"]), kinds
        cmdline = Path(f"/proc/{process.pid}/cmdline").read_bytes().split(b"\0")
        assert b"jupyter_sandbox.kernel" in cmdline
        assert value_of(kc, "6 * 7") == "42"
        assert imported(notebook_dir(env)) is None
        kc.shutdown()
        assert process.wait(timeout=60) == 0
    finally:
        kc.stop_channels()
        if process.poll() is None:
            process.kill()
    assert process.stderr is not None
    assert f"no zygote at {missing}" in process.stderr.read().decode()


@pytest.mark.integration
@pytest.mark.runc
def test_killing_the_launcher_ends_its_kernel_and_frees_the_context(
    env: Path, zygote: tuple[Zygote, Path]
) -> None:
    server, _ = zygote
    assert server.process is not None
    process, connection_file = launch(
        env, **{ZYGOTE_ENV: str(server.path), "JUPYTER_SANDBOX_CONTEXT": "held"}
    )
    kc = client(connection_file, process)
    kc.stop_channels()
    [kernel] = children_of(server.process.pid)
    lock = lock_path(env, default_owner(), "held")
    assert ContextLock.is_held(lock)
    process.kill()
    process.wait()
    assert wait_gone(kernel, timeout=5)
    assert not ContextLock.is_held(lock)


@pytest.mark.integration
@pytest.mark.runc
def test_sigterm_reaches_the_forked_kernel(env: Path, zygote: tuple[Zygote, Path]) -> None:
    server, _ = zygote
    assert server.process is not None
    process, connection_file = launch(env, **{ZYGOTE_ENV: str(server.path)})
    kc = client(connection_file, process)
    kc.stop_channels()
    [kernel] = children_of(server.process.pid)
    process.send_signal(signal.SIGTERM)  # jupyter_client's terminate, when shutdown stalls
    assert process.wait(timeout=60) == 0  # the proxy's clean exit on SIGTERM
    assert wait_gone(kernel)
    assert containers_under(env) == []  # and it removed its unnamed sandbox, as it does


@pytest.mark.integration
def test_a_request_for_a_missing_connection_file_is_refused_and_logged(
    env: Path, zygote: tuple[Zygote, Path]
) -> None:
    server, log_path = zygote
    missing = env.with_name(env.name + "-missing.json")
    argv = [sys.executable, "-I", "-S", str(LAUNCHER), "-f", str(missing)]
    launched = subprocess.run(
        argv, env={**os.environ, ZYGOTE_ENV: str(server.path)}, capture_output=True, check=False
    )
    assert launched.returncode == 1  # refused, then the ordinary proxy fails on the same file
    assert b"the zygote refused: connection file" in launched.stderr
    logged = log_path.read_text()
    assert "refused a kernel request from pid" in logged
    assert f"connection file '{missing}': No such file or directory" in logged


# -- without the engine ---------------------------------------------------------------------


@pytest.mark.parametrize("safe_path_flag", [True, False], ids=["-P", "bootstrap"])
def test_the_launchers_kernel_command_imports_nothing_from_the_notebooks_directory(
    tmp_path: Path, safe_path_flag: bool
) -> None:
    """Both forms of the command the launcher becomes (-P; before Python 3.11, a bootstrap):
    the proxy kernel starts, and fails on the missing connection file, with the real package."""
    missing = tmp_path / "missing.json"
    argv = launcher_module().kernel_command(str(missing), safe_path_flag=safe_path_flag)
    done = subprocess.run(argv, cwd=plant(tmp_path), capture_output=True, timeout=60)
    assert imported(tmp_path) is None, done.stderr
    assert done.returncode != 0
    assert str(missing).encode() in done.stderr  # the real kernel's complaint


def request(path: str, **changes: object) -> dict[str, object]:
    raw: dict[str, object] = {
        "connection_file": path,
        "env": dict(os.environ),
        "cwd": os.getcwd(),
        "umask": 0o022,
        "pid": os.getpid(),
        "executable": sys.executable,
    }
    return {**raw, **changes}


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"connection_file": "relative.json"}, "not an absolute path"),
        ({"connection_file": "/"}, "is not a regular file"),
        ({"connection_file": "/nonexistent/kernel.json"}, "No such file"),
        ({"pid": 1}, "names pid 1"),
        ({"executable": "/usr/bin/python3-other"}, "the kernel runs"),
        ({"env": {**os.environ, "PYTHONPATH": "/elsewhere"}}, "PYTHON* environment"),
        ({"cwd": "/nonexistent"}, "working directory"),
        ({"env": "not a mapping"}, "malformed request"),
    ],
)
def test_validate_refuses(tmp_path: Path, changes: dict[str, object], reason: str) -> None:
    connection_file = tmp_path / "kernel.json"
    connection_file.write_text("{}")
    raw = request(str(connection_file), **changes)
    with pytest.raises(Refused, match=reason.replace("*", r"\*")):
        validate(raw, [0, 1, 2], os.getpid())
    assert validate(request(str(connection_file)), [0, 1, 2], os.getpid()).fds == [0, 1, 2]
    with pytest.raises(Refused, match="expected 3 file descriptors"):
        validate(request(str(connection_file)), [0], os.getpid())
