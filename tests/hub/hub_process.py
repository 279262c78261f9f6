"""The hub of tests/hub/: its configuration (examples/jupyterhub_config.py with the test's ports,
paths and logins), its two fresh system users, its start and stop, and the calls made through
its proxy (:class:`Hub`). conftest.py runs one for the module; see test_jupyterhub.py."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker

from jupyter_sandbox.sandbox import labels
from tests.conftest import purpose_label, remove_state_dir
from tests.kernel.sandbox_env import remove_containers_under

REPO = Path(__file__).parents[2]
EXAMPLE = REPO / "examples" / "jupyterhub_config.py"
ARTIFACTS = REPO / "test-artifacts" / "hub"
VENV = Path(sys.prefix)
PROXY = VENV / "bin" / "configurable-http-proxy"
SYSTEM_PYTHON = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")
PURPOSE = purpose_label("tests/hub/test_jupyterhub.py")
STATE = ".local/share/jupyter/runtime/sandboxes"  # each user's sandboxes, under their home
SERVER_LOG = "jupyterhub-singleuser.log"  # each server's output, in its user's home

HUB_START = 60.0  # seconds for the hub and its proxy to answer
SERVER_START = 90.0  # for a user's server to be ready (also the spawner's own timeouts)
REQUEST_TIMEOUT = 60.0
KERNEL_TIMEOUT = 90.0  # a kernel's start, or a cell's reply
REMOVAL_TIMEOUT = 60.0  # a server's or a sandbox's removal


@dataclass
class Hub:
    url: str  # the proxy's, as a browser reaches the hub
    admin_token: str
    users: dict[str, str]  # "alice", "bob" -> the system user's name
    log_path: Path
    tokens: dict[str, str] = field(default_factory=dict)  # system user -> a token of theirs

    def request(
        self,
        method: str,
        path: str,
        token: str,
        body: Any = None,
        base: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        """(status, decoded JSON, or the text when it is not JSON); ``base``: another URL than
        the proxy's; ``headers``: sent besides the token's."""
        data = json.dumps(body).encode() if body is not None else None
        if data is None and method in ("POST", "PUT"):
            data = b""
        request = urllib.request.Request(
            f"{base or self.url}/{path}",
            data=data,
            method=method,
            headers={"Authorization": f"token {token}", **(headers or {})},
        )
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT) as response:
                status, text = response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            status, text = error.code, error.read().decode(errors="replace")
        try:
            return status, json.loads(text) if text else None
        except ValueError:
            return status, text

    def hub_api(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return self.request(method, f"hub/api/{path}", self.admin_token, body)

    def server(self, role: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """A request to the server of ``role`` ("alice", "bob") with a token of that user."""
        name = self.users[role]
        return self.request(method, f"user/{name}/{path}", self.tokens[name], body)

    def log_tails(self, lines: int = 80) -> str:
        parts = [("hub and proxy", self.log_path)]
        parts += [(name, home_of(name) / SERVER_LOG) for name in self.users.values()]
        return "\n".join(f"--- {title}: {path}\n{tail(path, lines)}" for title, path in parts)


def tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as error:
        return f"(unreadable: {error})"


def home_of(name: str) -> Path:
    return Path(f"/home/{name}")


def uid_of(name: str) -> int:
    return pwd.getpwnam(name).pw_uid


def free_ports(count: int) -> list[int]:
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]


def hub_config(ports: list[int], hub_dir: Path, config_dir: Path, users: list[str]) -> str:
    """examples/jupyterhub_config.py, then what the test changes."""
    environment = {
        "PATH": "/usr/bin:/bin",
        # The package from this checkout, its dependencies (and jupyterhub's) from the venv.
        "PYTHONPATH": os.pathsep.join([str(REPO), sysconfig.get_paths()["purelib"]]),
        # The venv's kernelspecs, lab extensions, Lab's assets, and its jupyter-config (the
        # server extension enabled); before it, the test's jupyter_sandbox_config.py.
        "JUPYTER_PATH": str(VENV / "share" / "jupyter"),
        "JUPYTERLAB_DIR": str(VENV / "share" / "jupyter" / "lab"),
        "JUPYTER_CONFIG_PATH": os.pathsep.join([str(config_dir), str(VENV / "etc" / "jupyter")]),
        "JUPYTER_SANDBOX_PURPOSE": PURPOSE,  # the kernels' containers' label
    }
    # The server's output to a log in its user's home (LocalProcessSpawner leaves it on the hub's).
    command = ["/bin/sh", "-c", f'exec "$@" >>"$HOME/{SERVER_LOG}" 2>&1', "sh"]
    command += [str(SYSTEM_PYTHON), "-m", "jupyterhub.singleuser"]
    hub_port, api_port, proxy_port = ports
    return f"""\
import os

assert os.path.exists({str(EXAMPLE)!r})  # load_subconfig passes over a missing file silently
load_subconfig({str(EXAMPLE)!r})

c.JupyterHub.bind_url = "http://127.0.0.1:{proxy_port}"
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{hub_port}"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{api_port}"
c.JupyterHub.db_url = "sqlite:///{hub_dir}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{hub_dir}/jupyterhub_cookie_secret"
c.ConfigurableHTTPProxy.pid_file = "{hub_dir}/jupyterhub-proxy.pid"

c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allowed_users = {set(users)!r}
c.JupyterHub.services = [{{"name": "hub-test", "api_token": os.environ["HUB_TEST_TOKEN"]}}]
c.JupyterHub.load_roles = [{{"name": "admin", "services": ["hub-test"]}}]

c.Spawner.cmd = {command!r}
c.Spawner.environment = {environment!r}
c.Spawner.start_timeout = {int(SERVER_START)}
c.Spawner.http_timeout = {int(SERVER_START)}
"""


SANDBOX_CONFIG = f"""\
c.SandboxSettings.runtime = "runc"
c.WarmPool.size = 0
c.SandboxExtension.container_purpose = {PURPOSE!r}
c.SandboxCuller.interval = 3600.0
"""


def make_user(role: str, groups: tuple[str, ...] = ("docker",)) -> str:
    """A new system user in ``groups`` (none: only its own), with a home."""
    name = f"jsbx-{role}-{secrets.token_hex(3)}"
    in_groups = ["--groups", ",".join(groups)] if groups else []
    subprocess.run(
        ["useradd", "--create-home", *in_groups, "--shell", "/usr/sbin/nologin", name],
        check=True,
    )
    return name


def remove_user(name: str, role: str) -> None:
    """The user's server log to the artifacts; anything of theirs left (processes, by pid;
    sandboxes); then the user and its home."""
    home = home_of(name)
    with contextlib.suppress(OSError):
        shutil.copyfile(home / SERVER_LOG, ARTIFACTS / f"{role}-server.log")
    listed = subprocess.run(["ps", "-o", "pid=", "-u", name], capture_output=True, text=True)
    for pid in listed.stdout.split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)
    if (home / STATE).exists():
        remove_containers_under(home / STATE)
        remove_state_dir(home / STATE)
    subprocess.run(["userdel", "--remove", name], capture_output=True)
    shutil.rmtree(home, ignore_errors=True)


@contextlib.contextmanager
def file_of_user(name: str, relative: str, text: str) -> Iterator[Path]:
    """A file in the user's home, theirs as if they had written it (and its directories, made
    where missing); removed afterwards, with the directories made for it if left empty."""
    path = home_of(name) / relative
    made = [p for p in reversed(path.relative_to(home_of(name)).parents) if p != Path(".")]
    made = [home_of(name) / p for p in made if not (home_of(name) / p).exists()]
    for directory in made:
        directory.mkdir()
        shutil.chown(directory, name, name)
    path.write_text(text)
    shutil.chown(path, name, name)
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)
        for directory in reversed(made):
            with contextlib.suppress(OSError):  # the user's server may have put files there
                directory.rmdir()


def owners_containers(names: list[str]) -> list[str]:
    client = docker.from_env(version="auto")
    return [
        f"{row['Names'][0].lstrip('/')} (owner {row['Labels'][labels.OWNER]})"
        for name in names
        for row in client.api.containers(all=True, filters=labels.owner_filter(name))
    ]


def wait_until_no_containers(names: list[str]) -> list[str]:
    """The containers of those owners still there after REMOVAL_TIMEOUT at most."""
    deadline = time.monotonic() + REMOVAL_TIMEOUT
    while (left := owners_containers(names)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def wait_until_up(
    hub: Hub, process: subprocess.Popen[bytes], hub_port: int, timeout: float = HUB_START
) -> None:
    """Until the hub answers through its proxy. The hub's own port first: the proxy, up before
    the hub, answers 404 meanwhile, with a stack trace in the log for each."""
    deadline = time.monotonic() + timeout
    for url in (f"http://127.0.0.1:{hub_port}", hub.url):
        while True:
            if process.poll() is not None:
                raise AssertionError(f"the hub exited ({process.returncode}):\n{hub.log_tails()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no hub at {url} in {timeout:g}s:\n{hub.log_tails()}")
            with contextlib.suppress(OSError):
                status, answer = hub.request("GET", "hub/api/", hub.admin_token, base=url)
                if status == 200 and "version" in answer:
                    break
            time.sleep(0.1)  # polling for readiness, not waiting a fixed time


def wait_for_servers(hub: Hub, ready: bool, names: list[str] | None = None) -> None:
    """Until every user's server (or those of ``names``) is ready (``ready``), or gone."""
    deadline = time.monotonic() + (SERVER_START if ready else REMOVAL_TIMEOUT) + 10
    waiting = set(hub.users.values() if names is None else names)
    while waiting and time.monotonic() < deadline:
        for name in sorted(waiting):
            status, user = hub.hub_api("GET", f"users/{name}")
            assert status == 200, user
            server = user["servers"].get("")
            if ready and server is not None and server["ready"]:
                waiting.discard(name)
            elif ready and server is None:  # the spawn failed, and the hub forgot it
                raise AssertionError(f"{name}'s server failed to start:\n{hub.log_tails()}")
            elif not ready and server is None:
                waiting.discard(name)
        time.sleep(0.2)
    if waiting:
        what = "ready" if ready else "stopped"
        raise AssertionError(f"not {what} in time: {sorted(waiting)}\n{hub.log_tails()}")


def stop_servers(hub: Hub) -> None:
    """Through the hub, as an admin would; then nothing of the users' may be left running."""
    for name in hub.users.values():
        status, answer = hub.hub_api("DELETE", f"users/{name}/server")
        assert status in (202, 204, 400), answer  # 400: it was not running
    wait_for_servers(hub, ready=False)
    left = owners_containers(list(hub.users.values()))
    assert not left, f"sandboxes left after the servers stopped: {left}"


def stop_hub(process: subprocess.Popen[bytes], proxy_pid: int | None) -> None:
    """SIGTERM: the hub stops the servers it still runs and its proxy; then make sure."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    if proxy_pid is not None:  # its own session: the hub stops it, unless the hub was killed
        with contextlib.suppress(OSError):
            if b"configurable-http-proxy" in Path(f"/proc/{proxy_pid}/cmdline").read_bytes():
                os.kill(proxy_pid, signal.SIGKILL)
