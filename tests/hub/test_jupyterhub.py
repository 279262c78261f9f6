"""A real JupyterHub on one host, configured by examples/jupyterhub_config.py, serving two system
users whose single-user servers run the server extension and Sandboxed Python.

The hub runs as root on 127.0.0.1 (free ports, its state in a private directory) behind
configurable-http-proxy (`make hub-proxy`, part of `make test`, installs it into the
virtualenv), with DummyAuthenticator for two fresh system users in the docker group (made for
the module, removed with their homes afterwards) and an admin service token. LocalProcessSpawner
starts each user's server as that user. Every request goes through the hub's proxy, as a
browser's would: the hub's REST API with the admin token, each user's server at /user/NAME/ with
a token the hub issued for that user.

Besides ports, paths and logins, the test changes one thing in the example: the servers run
under Debian's own Python 3, importing this checkout and the virtualenv's packages, as
tests/kernel/test_host_user.py does (the virtualenv's interpreter may live where other users
cannot reach, e.g. under /root). The hub's log (with the proxy's) and each server's log go to
test-artifacts/hub/; their ends are added to a failing test's report.
"""

from __future__ import annotations

import asyncio
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
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import docker
import pytest
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from jupyter_sandbox.sandbox import labels

from ..conftest import purpose_label, remove_state_dir
from ..kernel.sandbox_env import remove_containers_under
from .conftest import LOG_TAILS

pytestmark = [
    pytest.mark.integration,
    pytest.mark.runc,
    pytest.mark.skipif(os.geteuid() != 0, reason="the hub makes host users and runs as root"),
]

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
        self, method: str, path: str, token: str, body: Any = None, base: str | None = None
    ) -> tuple[int, Any]:
        """(status, decoded JSON, or the text when it is not JSON); ``base``: another URL than
        the proxy's."""
        data = json.dumps(body).encode() if body is not None else None
        if data is None and method in ("POST", "PUT"):
            data = b""
        request = urllib.request.Request(
            f"{base or self.url}/{path}",
            data=data,
            method=method,
            headers={"Authorization": f"token {token}"},
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


def make_user(role: str) -> str:
    """A new system user in the docker group, with a home."""
    name = f"jsbx-{role}-{secrets.token_hex(3)}"
    subprocess.run(
        ["useradd", "--create-home", "--groups", "docker", "--shell", "/usr/sbin/nologin", name],
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


def wait_until_up(hub: Hub, process: subprocess.Popen[bytes], hub_port: int) -> None:
    """Until the hub answers through its proxy. The hub's own port first: the proxy, up before
    the hub, answers 404 meanwhile, with a stack trace in the log for each."""
    deadline = time.monotonic() + HUB_START
    for url in (f"http://127.0.0.1:{hub_port}", hub.url):
        while True:
            if process.poll() is not None:
                raise AssertionError(f"the hub exited ({process.returncode}):\n{hub.log_tails()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no hub at {url} in {HUB_START:g}s:\n{hub.log_tails()}")
            with contextlib.suppress(OSError):
                status, answer = hub.request("GET", "hub/api/", hub.admin_token, base=url)
                if status == 200 and "version" in answer:
                    break
            time.sleep(0.1)  # polling for readiness, not waiting a fixed time


def wait_for_servers(hub: Hub, ready: bool) -> None:
    """Until every user's server is ready (``ready``), or gone."""
    deadline = time.monotonic() + (SERVER_START if ready else REMOVAL_TIMEOUT) + 10
    waiting = set(hub.users.values())
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


@pytest.fixture(scope="module")
def hub() -> Iterator[Hub]:
    for needed, how in [
        (SYSTEM_PYTHON, "the users' servers run under it"),
        (PROXY, "the hub's proxy: 'make hub-proxy' installs it (part of 'make test')"),
    ]:
        if not needed.exists():
            pytest.fail(f"{needed} is missing: {how}", pytrace=False)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for old in ARTIFACTS.glob("*.log"):
        old.unlink()
    with contextlib.ExitStack() as cleanup:
        users = {}
        for role in ("alice", "bob"):
            users[role] = make_user(role)
            cleanup.callback(remove_user, users[role], role)
        # Readable by the users: the test's jupyter_sandbox_config.py. Root's alone: the hub's.
        base = Path(tempfile.mkdtemp(prefix="jsbx-hub-", dir="/tmp"))
        cleanup.callback(shutil.rmtree, base, ignore_errors=True)
        base.chmod(0o755)
        config_dir, hub_dir = base / "config", base / "hub"
        config_dir.mkdir(mode=0o755)
        hub_dir.mkdir(mode=0o700)
        (config_dir / "jupyter_sandbox_config.py").write_text(SANDBOX_CONFIG)
        (config_dir / "jupyter_sandbox_config.py").chmod(0o644)
        ports = free_ports(3)
        (hub_dir / "jupyterhub_config.py").write_text(
            hub_config(ports, hub_dir, config_dir, list(users.values()))
        )

        hub = Hub(
            url=f"http://127.0.0.1:{ports[2]}",
            admin_token=secrets.token_hex(32),
            users=users,
            log_path=ARTIFACTS / "hub.log",
        )
        env = {
            name: value
            for name, value in os.environ.items()
            if not name.startswith(("JUPYTER", "PYTHON", "VIRTUAL_ENV"))
        }
        env.update(
            PATH=f"{VENV / 'bin'}:/usr/local/bin:/usr/bin:/bin", HUB_TEST_TOKEN=hub.admin_token
        )
        with hub.log_path.open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "jupyterhub", "-f", str(hub_dir / "jupyterhub_config.py")],
                cwd=hub_dir,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        proxy_pid: list[int] = []
        cleanup.callback(lambda: stop_hub(process, proxy_pid[0] if proxy_pid else None))
        wait_until_up(hub, process, ports[0])
        with contextlib.suppress(OSError, ValueError):
            proxy_pid.append(int((hub_dir / "jupyterhub-proxy.pid").read_text()))

        cleanup.callback(stop_servers, hub)
        # Both at once: the hub answers a spawn's request when the server is up (or after 10 s).
        with ThreadPoolExecutor() as pool:
            spawns = pool.map(
                lambda name: hub.hub_api("POST", f"users/{name}/server"), users.values()
            )
            for status, answer in spawns:
                assert status in (201, 202), f"{answer}\n{hub.log_tails()}"
        for name in users.values():
            status, answer = hub.hub_api(
                "POST", f"users/{name}/tokens", {"note": "tests/hub", "expires_in": 3600}
            )
            assert status == 201, f"{answer}\n{hub.log_tails()}"
            hub.tokens[name] = answer["token"]
        wait_for_servers(hub, ready=True)
        yield hub


@pytest.fixture(autouse=True)
def report_logs(request: pytest.FixtureRequest, hub: Hub) -> None:
    """A failing test's report ends with the hub's and the servers' logs."""
    request.node.stash[LOG_TAILS] = hub.log_tails


def test_each_hub_user_gets_sandboxes_of_their_own(hub: Hub) -> None:
    alice, bob = hub.users["alice"], hub.users["bob"]
    status, sandbox = hub.server("alice", "POST", "api/sandboxes", {"runtime": "runc"})
    assert status == 201, sandbox
    sandbox_id = sandbox["id"]
    try:
        assert sandbox["owner"] == alice
        status, run = hub.server(
            "alice",
            "POST",
            f"api/sandboxes/{sandbox_id}/execute",
            {"code": "import os; print(os.getuid(), 6 * 7)"},
        )
        assert status == 200, run
        assert run["status"] == "ok", run
        assert run["stdout"] == f"{uid_of(alice)} 42\n"  # her own uid inside
        status, listed = hub.server("alice", "GET", "api/sandboxes")
        assert status == 200, listed
        assert [s["id"] for s in listed] == [sandbox_id]

        # Bob's server shows him none of it, and refuses her sandbox by its id.
        status, listed = hub.server("bob", "GET", "api/sandboxes")
        assert (status, listed) == (200, [])
        for method, path, body in [
            ("GET", f"api/sandboxes/{sandbox_id}", None),
            ("POST", f"api/sandboxes/{sandbox_id}/execute", {"code": "print(1)"}),
            ("DELETE", f"api/sandboxes/{sandbox_id}", None),
        ]:
            status, answer = hub.server("bob", method, path, body)
            assert status == 404, (method, path, answer)

        # The container is the hub user's, its state under her home.
        container = docker.from_env(version="auto").containers.get(
            labels.container_name(sandbox_id)
        )
        assert container.labels[labels.OWNER] == alice
        assert Path(container.labels[labels.HOST_DIR]).parent == home_of(alice) / STATE
        assert owners_containers([bob]) == []
    finally:
        status, answer = hub.server("alice", "DELETE", f"api/sandboxes/{sandbox_id}")
    assert status == 204, answer
    assert owners_containers([alice]) == []


def test_each_server_is_what_the_example_configures(hub: Hub) -> None:
    status, specs = hub.server("bob", "GET", "api/kernelspecs")
    assert status == 200, specs
    assert specs["default"] == "sandboxed-python"
    assert list(specs["kernelspecs"]) == ["sandboxed-python"]  # the only kernel
    status, answer = hub.server("bob", "GET", "api/terminals")
    assert status == 404, answer  # terminals off
    # Nor can the user write, through Lab, the Python the server and kernels run on the host:
    # its config files are hidden, and the contents API refuses hidden paths.
    config = ".jupyter/jupyter_sandbox_config.py"
    bob_home = home_of(hub.users["bob"])
    (bob_home / ".jupyter").mkdir(exist_ok=True)  # there: not what the refusal is about
    shutil.chown(bob_home / ".jupyter", hub.users["bob"], hub.users["bob"])
    model = {"type": "file", "format": "text", "content": "c.SandboxSettings.cpus = 8\n"}
    status, answer = hub.server("bob", "PUT", f"api/contents/{config}", model)
    assert status == 400, answer
    assert not (bob_home / config).exists()
    status, page = hub.server("bob", "GET", "lab")
    assert status == 200, page
    assert '"jupyter-sandbox"' in page  # Lab loads the extension's frontend
    status, me = hub.server("bob", "GET", "api/me")
    assert status == 200, me
    assert me["identity"]["name"] == hub.users["bob"]


async def test_a_sandboxed_python_kernel_through_the_hub(hub: Hub) -> None:
    alice = hub.users["alice"]
    status, kernel = hub.server("alice", "POST", "api/kernels", {"name": "sandboxed-python"})
    assert status == 201, kernel
    try:
        ws_url = (
            f"{hub.url.replace('http', 'ws', 1)}/user/{alice}/api/kernels/{kernel['id']}/channels"
        )
        connection = await asyncio.wait_for(
            websocket_connect(
                HTTPRequest(ws_url, headers={"Authorization": f"token {hub.tokens[alice]}"})
            ),
            timeout=REQUEST_TIMEOUT,
        )
        try:
            stdout, reply = await run_cell(connection, "import os; print(os.getuid(), 6 * 7)")
        finally:
            connection.close()
        assert reply["status"] == "ok", reply
        assert stdout == f"{uid_of(alice)} 42\n"

        # Its sandbox: listed by her server with the kernel attached, hers, not Bob's.
        status, listed = hub.server("alice", "GET", "api/sandboxes")
        assert status == 200, listed
        attached = [s for s in listed if s["kernel"]["id"] == kernel["id"]]
        assert len(attached) == 1, listed
        assert attached[0]["owner"] == alice
        name = labels.container_name(attached[0]["id"])
        client = docker.from_env(version="auto")
        assert client.containers.get(name).labels[labels.OWNER] == alice
        assert hub.server("bob", "GET", "api/sandboxes") == (200, [])
    finally:
        status, answer = hub.server("alice", "DELETE", f"api/kernels/{kernel['id']}")
    assert status == 204, answer
    # The kernel's own sandbox goes with it.
    assert wait_until_no_containers([alice]) == []


def execute_request(code: str) -> dict[str, Any]:
    """A shell execute_request as JupyterLab sends it over the kernel WebSocket."""
    return {
        "header": {
            "msg_id": uuid.uuid4().hex,
            "msg_type": "execute_request",
            "username": "test",
            "session": uuid.uuid4().hex,
            "date": datetime.now(timezone.utc).isoformat(),
            "version": "5.3",
        },
        "parent_header": {},
        "metadata": {},
        "content": {
            "code": code,
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": True,
        },
        "buffers": [],
        "channel": "shell",
    }


async def run_cell(connection: Any, code: str) -> tuple[str, dict[str, Any]]:
    """Send ``code``; (what it printed, its execute_reply's content), once the kernel is idle."""
    request = execute_request(code)
    await connection.write_message(json.dumps(request))
    stdout: list[str] = []
    reply: dict[str, Any] | None = None
    idle = False
    deadline = time.monotonic() + KERNEL_TIMEOUT
    while reply is None or not idle:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"no execute_reply and idle in {KERNEL_TIMEOUT:g}s: {stdout}")
        raw = await asyncio.wait_for(connection.read_message(), timeout=remaining)
        assert raw is not None, "the kernel WebSocket closed"
        message = json.loads(raw)
        if message.get("parent_header", {}).get("msg_id") != request["header"]["msg_id"]:
            continue
        kind = message["header"]["msg_type"]
        if message["channel"] == "iopub" and kind == "stream":
            stdout.append(message["content"]["text"])
        elif message["channel"] == "iopub" and kind == "status":
            idle = message["content"]["execution_state"] == "idle"
        elif message["channel"] == "shell" and kind == "execute_reply":
            reply = message["content"]
    return "".join(stdout), reply
