"""A real JupyterHub whose users get Sandboxed Python from the sandbox gateway, configured by
examples/jupyterhub_gateway_config.py, with two fresh system users who are NOT in the docker
group.

The hub (root, 127.0.0.1, configurable-http-proxy) runs `jupyter sandbox gateway` as a managed
service: it alone holds the engine, its state in a 0700 directory of root's. LocalProcessSpawner
starts each user's server as that user, with GatewayClient.url the gateway behind the hub's
proxy and its own hub token. Every request goes through the proxy with tokens the hub issued:
the users' servers at /user/NAME/, the gateway at /services/sandbox-gateway/.

The gateway's log, the hub's and each server's go to test-artifacts/hub/; their ends are added
to a failing test's report. About 40 s for the module on this machine, most of it the hub's and
the servers' starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import http.client
import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import docker
import pytest
from tornado.httpclient import HTTPClientError, HTTPRequest
from tornado.websocket import WebSocketClientConnection, websocket_connect

from jupyter_sandbox.sandbox import labels
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory, sandbox_directories
from jupyter_sandbox.sandbox.lifecycle.pool import unclaimed_member
from jupyter_sandbox.sandbox.lifecycle.pool_directory import PoolDirectory
from jupyter_sandbox.sandbox.lifecycle.quotas import usage_of
from tests.conftest import remove_state_dir
from tests.hub.conftest import LOG_TAILS
from tests.hub.gateway_hub import (
    CONTEXT_OPTION,
    GATEWAY_LOG,
    KERNELS_PER_USER,
    SERVICE,
    USER_SANDBOX_CONFIG,
    gateway_hub_config,
    gateway_sandbox_config,
)
from tests.hub.hub_process import (
    ARTIFACTS,
    KERNEL_TIMEOUT,
    PROXY,
    REMOVAL_TIMEOUT,
    REQUEST_TIMEOUT,
    SYSTEM_PYTHON,
    VENV,
    Hub,
    free_ports,
    home_of,
    make_user,
    remove_user,
    stop_hub,
    tail,
    uid_of,
    wait_for_servers,
    wait_until_up,
)
from tests.kernel.sandbox_env import remove_containers_under
from tests.kernel_websocket import KERNEL_V1, cell_messages, run_cell
from tests.labextension.conftest import open_panel, sandbox_card, shot
from tests.server_extension.test_gateway_websocket import BINARY, COMM_CELL
from tests.server_extension.test_terminals import receive, run

pytestmark = [
    pytest.mark.integration,
    pytest.mark.runc,
    pytest.mark.skipif(os.geteuid() != 0, reason="the hub makes host users and runs as root"),
]

GATEWAY = f"services/{SERVICE}"
ENGINE_SOCKET = "/var/run/docker.sock"
# Seconds for the hub to answer: it routes its own API once its services answered, and the
# gateway (a Jupyter Server) takes a minute to import under this machine's shared load.
HUB_AND_GATEWAY_START = 180.0


class GatewayHub(Hub):
    gateway_state: Path
    gateway_log: Path

    def gateway(self, role: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """A request to the gateway, through the proxy, with a token of ``role``'s user."""
        name = self.users[role]
        return self.request(method, f"{GATEWAY}/{path}", self.tokens[name], body)

    def log_tails(self, lines: int = 80) -> str:
        return f"{super().log_tails(lines)}\n--- gateway\n{tail(self.gateway_log, lines)}"


@pytest.fixture(scope="module")
def gateway_hub() -> Iterator[GatewayHub]:
    for needed, how in [
        (SYSTEM_PYTHON, "the users' servers run under it"),
        (PROXY, "the hub's proxy: 'make hub-proxy' installs it (part of 'make test')"),
    ]:
        if not needed.exists():
            pytest.fail(f"{needed} is missing: {how}", pytrace=False)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as cleanup:
        users = {}
        for role in ("alice", "bob"):
            users[role] = make_user(role, groups=())
            cleanup.callback(remove_user, users[role], role)
        base = Path(tempfile.mkdtemp(prefix="jsbx-gwhub-", dir="/tmp"))
        cleanup.callback(shutil.rmtree, base, ignore_errors=True)
        base.chmod(0o755)
        config_dir, hub_dir = base / "config", base / "hub"
        gateway_state = base / "gw"  # short: the sandboxes' sockets are under it
        config_dir.mkdir(mode=0o755)
        hub_dir.mkdir(mode=0o700)
        gateway_state.mkdir(mode=0o700)
        gateway_config = base / "gateway-config"
        gateway_config.mkdir(mode=0o700)
        (gateway_config / "jupyter_sandbox_config.py").write_text(
            gateway_sandbox_config(gateway_state)
        )
        cleanup.callback(remove_state_dir, gateway_state)
        cleanup.callback(remove_containers_under, gateway_state)
        (config_dir / "jupyter_sandbox_config.py").write_text(USER_SANDBOX_CONFIG)
        (config_dir / "jupyter_sandbox_config.py").chmod(0o644)
        ports = free_ports(4)
        (hub_dir / "jupyterhub_config.py").write_text(
            gateway_hub_config(
                ports, hub_dir, config_dir, gateway_config, gateway_state, list(users.values())
            )
        )
        hub = GatewayHub(
            url=f"http://127.0.0.1:{ports[2]}",
            admin_token=secrets.token_hex(32),
            users=users,
            log_path=ARTIFACTS / "gateway-hub.log",
        )
        hub.gateway_state, hub.gateway_log = gateway_state, hub_dir / GATEWAY_LOG
        cleanup.callback(lambda: shutil.copyfile(hub.gateway_log, ARTIFACTS / GATEWAY_LOG))
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
        # Last: once the hub has stopped the servers and the gateway (which drains the users'
        # pools), nothing of either user is left.
        cleanup.callback(lambda: assert_nothing_left(hub))
        cleanup.callback(
            lambda: stop_hub_and_services(process, proxy_pid[0] if proxy_pid else None)
        )
        wait_until_up(hub, process, ports[0], timeout=HUB_AND_GATEWAY_START)
        with contextlib.suppress(OSError, ValueError):
            proxy_pid.append(int((hub_dir / "jupyterhub-proxy.pid").read_text()))

        cleanup.callback(stop_users_servers, hub)
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


def stop_hub_and_services(process: subprocess.Popen[bytes], proxy_pid: int | None) -> None:
    """stop_hub, then the processes the hub started that outlived it. A managed service runs
    in a session of its own, and a hub stopped while it still starts one (the gateway takes a
    minute to start under load) leaves it running; each is known by its pid and start time,
    taken while the hub is its parent."""
    children = [(pid, started_at(pid)) for pid in children_of(process.pid)]
    stop_hub(process, proxy_pid)
    for pid, start in children:
        if start is not None and started_at(pid) == start:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command's name (which may hold spaces)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def children_of(parent: int) -> list[int]:
    pids = (int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit())
    return [pid for pid in pids if (fields := _stat_fields(pid)) and int(fields[1]) == parent]


def started_at(pid: int) -> str | None:
    fields = _stat_fields(pid)
    return fields[19] if fields else None  # starttime, in clock ticks since boot


@pytest.fixture(autouse=True)
def report_logs(request: pytest.FixtureRequest, gateway_hub: GatewayHub) -> None:
    """Instead of conftest's (which would start the docker-group hub of test_jupyterhub.py)."""
    request.node.stash[LOG_TAILS] = gateway_hub.log_tails


def owner_labels(names: list[str]) -> dict[str, str]:
    """container name -> its owner label, for those owners' containers; unclaimed warm-pool
    members are left out (the gateway keeps them per user until it stops: pools.py), and so
    are containers removed while they were looked at (a stopped gateway's members go on their
    own, the container first, then its directory)."""
    client = docker.from_env(version="auto")
    kept = {}
    for container, container_labels in listed(names).items():
        host_dir = Path(container_labels[labels.HOST_DIR])
        state = SandboxDirectory(host_dir.parent, host_dir.name).read_state()
        if unclaimed_member(state):
            continue
        if not state and not client.api.containers(all=True, filters={"name": container}):
            continue  # its directory is gone: removed since it was listed
        kept[container] = container_labels[labels.OWNER]
    return kept


def all_owner_labels(names: list[str]) -> dict[str, str]:
    return {container: found[labels.OWNER] for container, found in listed(names).items()}


def listed(names: list[str]) -> dict[str, dict[str, str]]:
    """container name -> its labels, for the containers of the owners ``names``."""
    client = docker.from_env(version="auto")
    return {
        row["Names"][0].lstrip("/"): row["Labels"]
        for name in names
        for row in client.api.containers(all=True, filters=labels.owner_filter(name))
    }


def wait_until_no_sandboxes(names: list[str]) -> dict[str, str]:
    """Those owners' containers (but unclaimed pool members) still there after
    REMOVAL_TIMEOUT at most."""
    deadline = time.monotonic() + REMOVAL_TIMEOUT
    while (left := owner_labels(names)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def stop_users_servers(hub: GatewayHub) -> None:
    """Through the hub, as an admin would; then none of the users' kernels' sandboxes may be
    left (their pools' unclaimed members are, until the gateway stops)."""
    for name in hub.users.values():
        status, answer = hub.hub_api("DELETE", f"users/{name}/server")
        assert status in (202, 204, 400), answer  # 400: it was not running
    wait_for_servers(hub, ready=False)
    left = wait_until_no_sandboxes(list(hub.users.values()))
    assert not left, f"sandboxes left after the servers stopped: {left}"


def assert_nothing_left(hub: GatewayHub) -> None:
    left = all_owner_labels(list(hub.users.values()))
    assert not left, f"containers left after the hub stopped the gateway: {left}"


async def websocket(
    hub: Hub, path: str, token: str, subprotocols: list[str] | None = None
) -> WebSocketClientConnection:
    """The WebSocket at ``path`` (behind the proxy), opened with ``token``."""
    url = f"{hub.url.replace('http', 'ws', 1)}/{path}"
    request = HTTPRequest(url, headers={"Authorization": f"token {token}"})
    return await asyncio.wait_for(
        websocket_connect(request, subprotocols=subprotocols), timeout=REQUEST_TIMEOUT
    )


async def cell(hub: Hub, path: str, token: str, code: str) -> tuple[str, dict[str, Any]]:
    """Run ``code`` over the kernel WebSocket at ``path`` (behind the proxy) with ``token``."""
    connection = await websocket(hub, path, token)
    try:
        return await run_cell(connection, code, KERNEL_TIMEOUT)
    finally:
        connection.close()


def test_the_users_servers_hold_no_engine(gateway_hub: GatewayHub) -> None:
    docker_group = grp.getgrnam("docker")
    for name in gateway_hub.users.values():
        assert name not in docker_group.gr_mem
    status, specs = gateway_hub.server("alice", "GET", "api/kernelspecs")
    assert status == 200, specs
    assert list(specs["kernelspecs"]) == ["sandboxed-python"]  # the gateway's only kernel
    assert specs["default"] == "sandboxed-python"


@pytest.mark.checklist(
    row=88,
    attack="a hub user's server (not in the docker group) starts a kernel through the gateway",
    expected="the kernel runs in a sandbox whose owner label is the token's hub user",
)
async def test_a_kernel_through_the_users_own_server(gateway_hub: GatewayHub, observe: Any) -> None:
    alice = gateway_hub.users["alice"]
    status, kernel = gateway_hub.server(
        "alice", "POST", "api/kernels", {"name": "sandboxed-python"}
    )
    assert status == 201, kernel
    try:
        stdout, reply = await cell(
            gateway_hub,
            f"user/{alice}/api/kernels/{kernel['id']}/channels",
            gateway_hub.tokens[alice],
            "import os; print(os.getcwd(), 6 * 7)",
        )
        assert reply["status"] == "ok", reply
        assert stdout == "/workspace 42\n"
        owners = owner_labels([alice])
        assert list(owners.values()) == [alice], owners
        status, listed = gateway_hub.gateway("alice", "GET", "api/sandboxes")
        assert status == 200, listed
        assert [s["owner"] for s in listed] == [alice]
        observe(f"one sandbox, labelled owner={alice}, listed at the gateway for her token")
    finally:
        status, answer = gateway_hub.server("alice", "DELETE", f"api/kernels/{kernel['id']}")
    assert status == 204, answer
    assert wait_until_no_sandboxes([alice]) == {}


@pytest.mark.checklist(
    row=89,
    attack="user B asks the gateway, and his own server, for user A's kernel and sandbox by id",
    expected="404 for every route (model, delete, interrupt, restart, channels, sandbox)",
)
async def test_another_users_kernel_is_not_found(gateway_hub: GatewayHub, observe: Any) -> None:
    alice, bob = gateway_hub.users["alice"], gateway_hub.users["bob"]
    status, kernel = gateway_hub.gateway(
        "alice", "POST", "api/kernels", {"name": "sandboxed-python"}
    )
    assert status == 201, kernel
    kernel_id = kernel["id"]
    try:
        # Her kernel runs (its sandbox is made as it starts, after the 201).
        stdout, reply = await cell(
            gateway_hub,
            f"{GATEWAY}/api/kernels/{kernel_id}/channels",
            gateway_hub.tokens[alice],
            "print(6 * 7)",
        )
        assert (stdout, reply["status"]) == ("42\n", "ok")
        status, listed = gateway_hub.gateway("alice", "GET", "api/sandboxes")
        assert status == 200, listed
        (sandbox_id,) = [s["id"] for s in listed]
        tried = [
            ("GET", f"api/kernels/{kernel_id}", None),
            ("POST", f"api/kernels/{kernel_id}/interrupt", {}),
            ("POST", f"api/kernels/{kernel_id}/restart", {}),
            ("DELETE", f"api/kernels/{kernel_id}", None),
            ("GET", f"api/sandboxes/{sandbox_id}", None),
            ("POST", f"api/sandboxes/{sandbox_id}/execute", {"code": "print(1)"}),
            ("DELETE", f"api/sandboxes/{sandbox_id}", None),
        ]
        for method, path, body in tried:
            status, answer = gateway_hub.gateway("bob", method, path, body)
            assert status == 404, (method, path, answer)
        assert gateway_hub.gateway("bob", "GET", "api/kernels") == (200, [])
        assert gateway_hub.gateway("bob", "GET", "api/sandboxes") == (200, [])
        # Through his own server, which asks the gateway with its own token: the same.
        status, answer = gateway_hub.server("bob", "GET", f"api/kernels/{kernel_id}")
        assert status == 404, answer
        with pytest.raises(HTTPClientError) as refused:
            await cell(
                gateway_hub,
                f"{GATEWAY}/api/kernels/{kernel_id}/channels",
                gateway_hub.tokens[bob],
                "print(1)",
            )
        assert refused.value.code == 404
        observe(
            f"{len(tried) + 2} requests by B for A's kernel or sandbox: all 404",
            cases=len(tried) + 2,
        )
    finally:
        status, answer = gateway_hub.gateway("alice", "DELETE", f"api/kernels/{kernel_id}")
    assert status == 204, answer
    assert wait_until_no_sandboxes([alice]) == {}


@pytest.mark.checklist(
    row=90,
    attack="user B starts a kernel claiming to be A: KERNEL_USERNAME, JUPYTER_SANDBOX_OWNER, "
    "JUPYTERHUB_USER and KERNEL_SANDBOX_OWNER in its env, ?user=A in the URL",
    expected="the kernel and its sandbox are B's; A sees none of it",
)
async def test_no_claim_changes_the_owner(gateway_hub: GatewayHub, observe: Any) -> None:
    alice, bob = gateway_hub.users["alice"], gateway_hub.users["bob"]
    claims = {
        "KERNEL_USERNAME": alice,
        "JUPYTER_SANDBOX_OWNER": alice,
        "JUPYTERHUB_USER": alice,
        "KERNEL_SANDBOX_OWNER": alice,
    }
    status, kernel = gateway_hub.request(
        "POST",
        f"{GATEWAY}/api/kernels?user={alice}",
        gateway_hub.tokens[bob],
        {"name": "sandboxed-python", "env": claims},
    )
    assert status == 201, kernel
    try:
        stdout, reply = await cell(
            gateway_hub,
            f"{GATEWAY}/api/kernels/{kernel['id']}/channels",
            gateway_hub.tokens[bob],
            "import os; print(os.environ.get('JUPYTER_SANDBOX_OWNER'))",
        )
        assert (stdout, reply["status"]) == ("None\n", "ok"), reply  # nothing reaches inside
        assert set(owner_labels([alice, bob]).values()) == {bob}
        assert gateway_hub.gateway("alice", "GET", "api/kernels") == (200, [])
        status, answer = gateway_hub.gateway("alice", "GET", f"api/kernels/{kernel['id']}")
        assert status == 404, answer
        observe(f"4 variables and a query naming {alice}: the sandbox's owner is {bob}", cases=5)
    finally:
        status, answer = gateway_hub.gateway("bob", "DELETE", f"api/kernels/{kernel['id']}")
    assert status == 204, answer
    assert wait_until_no_sandboxes([bob]) == {}


@pytest.mark.checklist(
    row=91,
    attack="a kernel's working directory outside the user's root, or leaving it through a "
    "symbolic link",
    expected="the start is refused with a message naming the directory; nothing is started",
)
def test_a_working_directory_outside_the_users_root_is_refused(
    gateway_hub: GatewayHub, observe: Any
) -> None:
    alice = gateway_hub.users["alice"]
    link = home_of(alice) / "escape"
    link.symlink_to("/root")
    try:
        for asked in [
            "/root",
            f"{home_of(alice)}/../../root",
            str(link),
            str(home_of(gateway_hub.users["bob"])),
        ]:
            status, answer = gateway_hub.gateway(
                "alice",
                "POST",
                "api/kernels",
                {"name": "sandboxed-python", "env": {"KERNEL_WORKING_DIR": asked}},
            )
            assert status == 400, (asked, answer)
            assert "KERNEL_WORKING_DIR" in answer["message"], answer
        assert owner_labels([alice]) == {}
        observe("4 directories outside /home/{username}, one through a symlink: 400 each", cases=4)
    finally:
        link.unlink()


async def test_the_notebooks_directory_is_the_workspace(gateway_hub: GatewayHub) -> None:
    alice = gateway_hub.users["alice"]
    notes = home_of(alice) / "notes"
    notes.mkdir()
    shutil.chown(notes, alice, alice)
    (notes / "data.txt").write_text("hers\n")
    shutil.chown(notes / "data.txt", alice, alice)
    session = {
        "path": "notes/a.ipynb",
        "type": "notebook",
        "name": "a.ipynb",
        "kernel": {"name": "sandboxed-python"},
    }
    status, made = gateway_hub.server("alice", "POST", "api/sessions", session)
    assert status == 201, made
    try:
        stdout, reply = await cell(
            gateway_hub,
            f"user/{alice}/api/kernels/{made['kernel']['id']}/channels",
            gateway_hub.tokens[alice],
            "print(open('/workspace/data.txt').read(), end='')",
        )
        assert (stdout, reply["status"]) == ("hers\n", "ok"), reply
        # Shown through the directory the kernel opened within her root and pinned, not by
        # its path (sandbox/host/workspace_pin.py).
        sandbox = sandbox_of_kernel(gateway_hub, made["kernel"]["id"])
        pin = SandboxDirectory(gateway_hub.gateway_state, sandbox["id"]).workspace_source
        assert (pin / "data.txt").read_text() == "hers\n"
    finally:
        status, answer = gateway_hub.server("alice", "DELETE", f"api/sessions/{made['id']}")
        shutil.rmtree(notes)
    assert status == 204, answer
    assert wait_until_no_sandboxes([alice]) == {}


@pytest.mark.checklist(
    row=92,
    attack="code run on the host as user A (a compromised server) opens the engine's socket "
    "and reads the gateway's state directory",
    expected="both refused (EACCES); the gateway answers it only as A",
)
def test_user_code_on_the_host_reaches_no_engine(gateway_hub: GatewayHub, observe: Any) -> None:
    alice = gateway_hub.users["alice"]
    probe = f"""
import os, socket
for what, act in [
    ("engine", lambda: socket.socket(socket.AF_UNIX).connect({ENGINE_SOCKET!r})),
    ("state", lambda: os.listdir({str(gateway_hub.gateway_state)!r})),
]:
    try:
        act()
        print(what, "open")
    except OSError as error:
        print(what, error.errno)
"""
    done = subprocess.run(
        [str(SYSTEM_PYTHON), "-I", "-c", probe],
        user=uid_of(alice),
        group=pwd.getpwnam(alice).pw_gid,
        extra_groups=[],
        capture_output=True,
        text=True,
        timeout=REQUEST_TIMEOUT,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["engine 13", "state 13"], done.stdout
    observe("engine socket: EACCES; gateway state directory: EACCES", cases=2)


@pytest.mark.checklist(
    row=93,
    attack="a user's server is stopped and started again through the hub, then the gateway is "
    "stopped (SIGTERM), while the user's named context holds variables",
    expected="the unnamed kernel's sandbox ends with the server; after each restart a new "
    "kernel of the named context reattaches, its variables intact, and it is the user's alone",
)
async def test_a_named_context_survives_the_servers_and_the_gateways_restarts(
    gateway_hub: GatewayHub, observe: Any
) -> None:
    alice = gateway_hub.users["alice"]
    token = gateway_hub.tokens[alice]
    start = {"name": "sandboxed-python"}
    try:
        # An unnamed kernel, through her server: its sandbox ends when the hub stops the server
        # (the server shuts its kernels down at the gateway).
        status, kernel = gateway_hub.server("alice", "POST", "api/kernels", start)
        assert status == 201, kernel
        channels = f"user/{alice}/api/kernels/{kernel['id']}/channels"
        stdout, reply = await cell(gateway_hub, channels, token, "print(1)")
        assert (stdout, reply["status"]) == ("1\n", "ok"), reply
        assert len(owner_labels([alice])) == 1
        await asyncio.to_thread(restart_server, gateway_hub, "alice", {CONTEXT_OPTION: "kept"})
        assert wait_until_no_sandboxes([alice]) == {}  # gone with the server, not culled

        # Her server now passes KERNEL_SANDBOX_CONTEXT=kept with every kernel start.
        values: list[str] = []
        for restart in ("server", "gateway", None):
            status, kernel = gateway_hub.server("alice", "POST", "api/kernels", start)
            assert status == 201, kernel
            channels = f"user/{alice}/api/kernels/{kernel['id']}/channels"
            code = "x = 6 * 7" if not values else "print(x)"
            stdout, reply = await cell(gateway_hub, channels, token, code)
            assert reply["status"] == "ok", reply
            values.append(stdout)
            assert list(owner_labels([alice]).values()) == [alice]  # one sandbox: the context's
            if restart == "server":
                await asyncio.to_thread(
                    restart_server, gateway_hub, "alice", {CONTEXT_OPTION: "kept"}
                )
            elif restart == "gateway":
                status, service = gateway_hub.hub_api("GET", f"services/{SERVICE}")
                assert status == 200, service
                assert service["pid"], service
                os.kill(service["pid"], signal.SIGTERM)
                await asyncio.to_thread(wait_for_a_new_gateway, gateway_hub, service["pid"])
        assert values == ["", "42\n", "42\n"], values
        assert gateway_hub.gateway("bob", "GET", "api/sandboxes") == (200, [])
        observe("x == 42 after her server's restart and after the gateway's", cases=2)
    finally:
        status, listed = gateway_hub.gateway("alice", "GET", "api/sandboxes")
        for sandbox in listed if status == 200 else []:
            gateway_hub.gateway("alice", "DELETE", f"api/sandboxes/{sandbox['id']}")
        await asyncio.to_thread(restart_server, gateway_hub, "alice", {CONTEXT_OPTION: ""})
    assert wait_until_no_sandboxes([alice]) == {}


def restart_server(hub: GatewayHub, role: str, options: dict[str, str]) -> None:
    """Stop ``role``'s server through the hub and start it again with ``options`` (its user
    options, which the test's hub turns into KERNEL_* variables of the server)."""
    name = hub.users[role]
    status, answer = hub.hub_api("DELETE", f"users/{name}/server")
    assert status in (202, 204), answer
    wait_for_servers(hub, ready=False, names=[name])
    status, answer = hub.hub_api("POST", f"users/{name}/server", {"user_options": options})
    assert status in (201, 202), f"{answer}\n{hub.log_tails()}"
    wait_for_servers(hub, ready=True, names=[name])


GATEWAY_RESTART = 120.0  # seconds: the hub polls its services every 30 s, then starts one


def wait_for_a_new_gateway(hub: GatewayHub, old_pid: int) -> int:
    """The pid of the gateway the hub started after ``old_pid`` ended, once it answers."""
    deadline = time.monotonic() + GATEWAY_RESTART
    while time.monotonic() < deadline:
        status, service = hub.hub_api("GET", f"services/{SERVICE}")
        new = status == 200 and service["pid"] not in (0, old_pid)
        if new and hub.gateway("alice", "GET", "api/kernels")[0] == 200:
            return int(service["pid"])
        time.sleep(0.5)  # polling for the restart, not waiting a fixed time
    raise AssertionError(f"no new gateway in {GATEWAY_RESTART:g}s:\n{hub.log_tails()}")


@pytest.mark.checklist(
    row=94,
    attack="a token acts as another user at the gateway with the Sandbox-Act-As header",
    expected="only a token with custom:sandbox-gateway:admin may, and each request is logged; "
    "any other token is refused (403), and a service's token owns nothing",
)
def test_admin_access_is_explicit_and_logged(gateway_hub: GatewayHub, observe: Any) -> None:
    alice, bob = gateway_hub.users["alice"], gateway_hub.users["bob"]
    status, kernel = gateway_hub.gateway(
        "alice", "POST", "api/kernels", {"name": "sandboxed-python"}
    )
    assert status == 201, kernel
    try:
        as_alice = {"Sandbox-Act-As": alice}
        admin = gateway_hub.admin_token  # the hub-test service, given the gateway's admin role
        status, listed = gateway_hub.request(
            "GET", f"{GATEWAY}/api/kernels", admin, headers=as_alice
        )
        assert status == 200, listed
        assert [k["id"] for k in listed] == [kernel["id"]]
        status, answer = gateway_hub.request(
            "GET", f"{GATEWAY}/api/kernels", gateway_hub.tokens[bob], headers=as_alice
        )
        assert status == 403, answer
        status, answer = gateway_hub.request("GET", f"{GATEWAY}/api/kernels", admin)
        assert status == 403, answer  # a service acts as someone or not at all
        logged = gateway_hub.gateway_log.read_text(errors="replace")
        assert f"admin access: service hub-test acts as {alice}: GET" in logged
        assert f"refused user {bob} acting as '{alice}'" in logged
        observe("the admin service's request as A: logged and answered; B's: 403", cases=3)
    finally:
        status, answer = gateway_hub.gateway("alice", "DELETE", f"api/kernels/{kernel['id']}")
    assert status == 204, answer
    assert wait_until_no_sandboxes([alice]) == {}


@pytest.mark.checklist(
    row=145,
    attack="an admin token sends two Sandbox-Act-As headers (read together as 'A,B'), or one "
    "naming a list",
    expected="400 saying to name one hub user; no one is acted as",
)
def test_acting_as_takes_exactly_one_name(gateway_hub: GatewayHub, observe: Any) -> None:
    alice, bob = gateway_hub.users["alice"], gateway_hub.users["bob"]
    tried = [[alice, bob], [f"{alice},{bob}"], [f"{alice}/.."]]
    for names in tried:
        status, answer = request_with_headers(
            gateway_hub,
            "GET",
            f"{GATEWAY}/api/kernels",
            [("Authorization", f"token {gateway_hub.admin_token}")]
            + [("Sandbox-Act-As", name) for name in names],
        )
        assert status == 400, (names, answer)
        assert "Sandbox-Act-As" in answer, answer
    assert f"admin access: service hub-test acts as {alice}," not in (
        gateway_hub.gateway_log.read_text(errors="replace")
    )
    observe("two headers, a list in one, a path: 400 each", cases=len(tried))


def request_with_headers(
    hub: Hub, method: str, path: str, headers: list[tuple[str, str]], body_start: bytes = b""
) -> tuple[int, str]:
    """(status, body text) of a request through the proxy with ``headers`` as given, a name
    repeated as often as it is listed (a dict of headers cannot repeat one); ``body_start``
    sent after them, and nothing more."""
    url = urllib.parse.urlsplit(hub.url)
    connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=REQUEST_TIMEOUT)
    try:
        connection.putrequest(method, f"/{path}")
        for name, value in headers:
            connection.putheader(name, value)
        connection.endheaders(body_start or None)
        response = connection.getresponse()
        return response.status, response.read().decode(errors="replace")
    finally:
        connection.close()


@pytest.mark.checklist(
    row=142,
    attack="a hub user starts kernels at the gateway, one after another, each a process on "
    "the gateway's host",
    expected="the start beyond SandboxGateway.max_kernels_per_user is refused (429, saying to "
    "shut a kernel down); another user still starts theirs",
)
def test_a_users_kernels_are_capped(gateway_hub: GatewayHub, observe: Any) -> None:
    names = {role: gateway_hub.users[role] for role in ("alice", "bob")}
    started: dict[str, list[str]] = {role: [] for role in names}
    start = {"name": "sandboxed-python"}
    try:
        for _ in range(KERNELS_PER_USER):
            status, kernel = gateway_hub.gateway("alice", "POST", "api/kernels", start)
            assert status == 201, kernel
            started["alice"].append(kernel["id"])
        status, answer = gateway_hub.gateway("alice", "POST", "api/kernels", start)
        assert status == 429, answer
        assert answer["code"] == "too_many_kernels", answer
        assert "shut one of them down" in answer["message"], answer
        status, listed = gateway_hub.gateway("alice", "GET", "api/kernels")
        assert status == 200, listed
        assert sorted(k["id"] for k in listed) == sorted(started["alice"])
        status, kernel = gateway_hub.gateway("bob", "POST", "api/kernels", start)
        assert status == 201, kernel
        started["bob"].append(kernel["id"])
        # One of hers shut down, she may start another.
        status, answer = gateway_hub.gateway(
            "alice", "DELETE", f"api/kernels/{started['alice'].pop()}"
        )
        assert status == 204, answer
        status, kernel = gateway_hub.gateway("alice", "POST", "api/kernels", start)
        assert status == 201, kernel
        started["alice"].append(kernel["id"])
        observe(
            f"start {KERNELS_PER_USER + 1} of A: 429; B's start: 201; A's after one shut down: 201",
            cases=3,
        )
    finally:
        for role, kernel_ids in started.items():
            for kernel_id in kernel_ids:
                gateway_hub.gateway(role, "DELETE", f"api/kernels/{kernel_id}")
    assert wait_until_no_sandboxes(list(names.values())) == {}


@pytest.mark.checklist(
    row=143,
    attack="a hub user starts a kernel with KERNEL_SANDBOX_LIMITS the sandbox cannot take: "
    "hundreds of digits, Arabic-Indic digits, a limit named twice, one above the maximum",
    expected="400 at the start, naming the variable or the limit; no kernel is started",
)
def test_a_kernels_bad_limits_are_refused_at_its_start(
    gateway_hub: GatewayHub, observe: Any
) -> None:
    alice = gateway_hub.users["alice"]
    tried = [
        "memory=" + "9" * 30 + "g",
        "pids=\u0661\u0660\u0660",
        "memory=1g,memory=2g",
        "memory=1000t",
        "cpus=" + "9" * 30,
    ]
    for limits in tried:
        status, answer = gateway_hub.gateway(
            "alice",
            "POST",
            "api/kernels",
            {"name": "sandboxed-python", "env": {"KERNEL_SANDBOX_LIMITS": limits}},
        )
        assert status == 400, (limits, answer)
        assert answer["code"] == "invalid_setting", answer
    assert gateway_hub.gateway("alice", "GET", "api/kernels") == (200, [])
    assert owner_labels([alice]) == {}
    observe(f"{len(tried)} bad KERNEL_SANDBOX_LIMITS: 400 each, no kernel", cases=len(tried))


@pytest.mark.checklist(
    row=152,
    attack="a hub user declares a 256 MiB kernel start to the gateway and sends 1 KiB of it",
    expected="413 (request_too_large) by its declared length, the rest never read: the "
    "gateway, which every hub user shares, reads a start's body only once authenticated and "
    "only up to its 1 MiB",
)
def test_a_kernel_start_past_its_bound_is_refused_from_its_head(
    gateway_hub: GatewayHub, observe: Any
) -> None:
    alice = gateway_hub.users["alice"]
    status, answer = request_with_headers(
        gateway_hub,
        "POST",
        f"{GATEWAY}/api/kernels",
        [
            ("Authorization", f"token {gateway_hub.tokens[alice]}"),
            ("Content-Type", "application/json"),
            ("Content-Length", str(256 * 1024**2)),
        ],
        # The hub's proxy (node) sends a request's head on with its first body bytes.
        body_start=b" " * 1024,
    )
    assert status == 413, answer
    assert "request_too_large" in answer, answer
    observe("a start declaring 256 MiB: 413 after 1 KiB of its body was sent")


def test_the_users_own_server_forwards_sandboxes_to_the_gateway(gateway_hub: GatewayHub) -> None:
    alice = gateway_hub.users["alice"]
    status, sandbox = gateway_hub.server("alice", "POST", "api/sandboxes", {"runtime": "runc"})
    assert status == 201, sandbox
    try:
        assert sandbox["owner"] == alice
        assert list(owner_labels([alice]).values()) == [alice]  # made by the gateway's engine
        status, run = gateway_hub.server(
            "alice", "POST", f"api/sandboxes/{sandbox['id']}/execute", {"code": "print(6 * 7)"}
        )
        assert (status, run["stdout"]) == (200, "42\n"), run
        status, listed = gateway_hub.server("alice", "GET", "api/sandboxes")
        assert status == 200, listed
        assert [s["id"] for s in listed] == [sandbox["id"]]
        assert gateway_hub.gateway("alice", "GET", "api/sandboxes")[1] == listed
        # Bob's server asks the gateway as Bob: none of hers.
        assert gateway_hub.server("bob", "GET", "api/sandboxes") == (200, [])
        status, answer = gateway_hub.server("bob", "GET", f"api/sandboxes/{sandbox['id']}")
        assert status == 404, answer
        assert answer["code"] == "sandbox_not_found", answer  # the gateway's own answer
    finally:
        status, answer = gateway_hub.server("alice", "DELETE", f"api/sandboxes/{sandbox['id']}")
    assert status == 204, answer
    assert wait_until_no_sandboxes([alice]) == {}


async def test_a_kernel_message_with_binary_buffers_through_the_users_own_server(
    gateway_hub: GatewayHub,
) -> None:
    """JupyterLab's protocol from the browser to the gateway, and a comm's bytes through it
    (tests/server_extension/test_gateway_websocket.py tests the relay against a plain gateway)."""
    alice = gateway_hub.users["alice"]
    status, kernel = gateway_hub.server(
        "alice", "POST", "api/kernels", {"name": "sandboxed-python"}
    )
    assert status == 201, kernel
    try:
        connection = await websocket(
            gateway_hub,
            f"user/{alice}/api/kernels/{kernel['id']}/channels",
            gateway_hub.tokens[alice],
            [KERNEL_V1],
        )
        try:
            assert connection.selected_subprotocol == KERNEL_V1
            messages = await cell_messages(connection, COMM_CELL, KERNEL_TIMEOUT)
        finally:
            connection.close()
        (opened,) = (m for m in messages if m["header"]["msg_type"] == "comm_open")
        assert opened["buffers"] == [BINARY]
        printed = [m["content"]["text"] for m in messages if m["header"]["msg_type"] == "stream"]
        assert printed == ["after the comm\n"]
    finally:
        status, answer = gateway_hub.server("alice", "DELETE", f"api/kernels/{kernel['id']}")
    assert status == 204, answer
    assert wait_until_no_sandboxes([alice]) == {}


async def test_a_sandboxs_terminal_through_the_users_own_server(gateway_hub: GatewayHub) -> None:
    alice, bob = gateway_hub.users["alice"], gateway_hub.users["bob"]
    status, sandbox = gateway_hub.server("alice", "POST", "api/sandboxes", {"runtime": "runc"})
    assert status == 201, sandbox
    terminal = f"api/sandboxes/{sandbox['id']}/terminal?rows=24&cols=80"
    try:
        connection = await websocket(
            gateway_hub, f"user/{alice}/{terminal}", gateway_hub.tokens[alice]
        )
        try:
            assert await receive(connection) == ["setup", {}]
            assert await run(connection, "pwd") == "/workspace\r\n"
        finally:
            connection.close()
        # Bob's server asks the gateway as Bob, who is told there is no such sandbox.
        with pytest.raises(HTTPClientError) as refused:
            await websocket(gateway_hub, f"user/{bob}/{terminal}", gateway_hub.tokens[bob])
        assert refused.value.code == 404
        assert refused.value.response is not None
        assert json.loads(refused.value.response.body)["code"] == "sandbox_not_found"
    finally:
        status, answer = gateway_hub.server("alice", "DELETE", f"api/sandboxes/{sandbox['id']}")
    assert status == 204, answer
    assert wait_until_no_sandboxes([alice]) == {}


def test_the_users_own_server_forwards_credentials_to_the_gateway(
    gateway_hub: GatewayHub,
) -> None:
    """The credentials a user sets at their own server are the gateway's, with the sandboxes
    whose proxies read them, and the user's alone; no answer carries the value."""
    body = {"hosts": ["api.example.com"], "headers": {"Authorization": "Bearer gw-secret-81f2"}}
    status, made = gateway_hub.server("alice", "PUT", "api/credentials/gh", body)
    try:
        assert (status, made["headers"]) == (201, ["Authorization"]), made
        status, listed = gateway_hub.gateway("alice", "GET", "api/credentials")
        assert (status, [item["name"] for item in listed["credentials"]]) == (200, ["gh"])
        assert gateway_hub.server("alice", "GET", "api/credentials") == (status, listed)
        assert gateway_hub.server("bob", "GET", "api/credentials") == (200, {"credentials": []})
        status, answer = gateway_hub.server("bob", "DELETE", "api/credentials/gh")
        assert (status, answer["code"]) == (404, "credential_not_found"), answer
        assert "gw-secret-81f2" not in json.dumps([made, listed, answer])
    finally:
        status, answer = gateway_hub.server("alice", "DELETE", "api/credentials/gh")
    assert status == 204, answer


@pytest.mark.parametrize("runtime", ["runc", "runsc"])
async def test_the_runtime_is_the_users_choice(gateway_hub: GatewayHub, runtime: str) -> None:
    """KERNEL_SANDBOX_RUNTIME from the client picks the runtime (the gateway's default: runc)."""
    alice = gateway_hub.users["alice"]
    start = {"name": "sandboxed-python", "env": {"KERNEL_SANDBOX_RUNTIME": runtime}}
    status, kernel = gateway_hub.gateway("alice", "POST", "api/kernels", start)
    assert status == 201, kernel
    try:
        channels = f"{GATEWAY}/api/kernels/{kernel['id']}/channels"
        stdout, reply = await cell(gateway_hub, channels, gateway_hub.tokens[alice], "print(7)")
        assert (stdout, reply["status"]) == ("7\n", "ok"), reply
        (name,) = owner_labels([alice])
        container = docker.from_env(version="auto").containers.get(name)
        assert container.attrs["HostConfig"]["Runtime"] == runtime
    finally:
        status, answer = gateway_hub.gateway("alice", "DELETE", f"api/kernels/{kernel['id']}")
    assert status == 204, answer
    assert wait_until_no_sandboxes([alice]) == {}


def members_of(hub: GatewayHub, owner: str) -> set[str]:
    """The sandbox ids of ``owner``'s unclaimed warm-pool members, by the gateway's state."""
    return {
        directory.sandbox_id
        for directory in sandbox_directories(hub.gateway_state)
        if (state := directory.read_state()).get("owner") == owner and unclaimed_member(state)
    }


def sandbox_of_kernel(hub: GatewayHub, kernel_id: str) -> dict[str, Any]:
    """The gateway's state of the sandbox the kernel ``kernel_id`` attached to."""
    for directory in sandbox_directories(hub.gateway_state):
        state = directory.read_state()
        if state.get("kernel_id") == kernel_id:
            return {**state, "id": directory.sandbox_id}
    raise AssertionError(f"no sandbox of kernel {kernel_id}")


def wait_for_members(hub: GatewayHub, owner: str) -> set[str]:
    """``owner``'s members once there is one whose kernel answered (it has its ticket)."""
    deadline = time.monotonic() + KERNEL_TIMEOUT
    while not (members := members_of(hub, owner) & ticketed(hub)):
        assert time.monotonic() < deadline, f"no warm sandbox for {owner}:\n{hub.log_tails()}"
        time.sleep(0.2)  # polling the pool, not waiting a fixed time
    return members


def ticketed(hub: GatewayHub) -> set[str]:
    pool = PoolDirectory(hub.gateway_state)
    return {member for key in pool.pool_keys() for member in pool.tickets(key)}


@pytest.mark.checklist(
    row=125,
    attack="two hub users start kernels from the gateway's warm pool, one after the other",
    expected="each claims a member of their own pool, labelled with their name; one user's "
    "claim leaves the other's member alone; quotas count each user's claimed sandboxes only",
)
async def test_each_user_claims_from_their_own_warm_pool(
    gateway_hub: GatewayHub, observe: Any
) -> None:
    roles = ("alice", "bob")
    names = {role: gateway_hub.users[role] for role in roles}
    kernels: dict[str, list[str]] = {role: [] for role in roles}

    async def start_and_run(role: str) -> dict[str, Any]:
        status, kernel = gateway_hub.server(
            role, "POST", "api/kernels", {"name": "sandboxed-python"}
        )
        assert status == 201, kernel
        kernels[role].append(kernel["id"])
        channels = f"user/{names[role]}/api/kernels/{kernel['id']}/channels"
        stdout, reply = await cell(
            gateway_hub, channels, gateway_hub.tokens[names[role]], "print(7)"
        )
        assert (stdout, reply["status"]) == ("7\n", "ok"), reply
        return sandbox_of_kernel(gateway_hub, kernel["id"])

    try:
        for role in roles:  # a user's first kernel start makes the gateway keep their pool
            await start_and_run(role)
        members = {role: wait_for_members(gateway_hub, names[role]) for role in roles}
        assert not members["alice"] & members["bob"]
        claimed = {}
        for role in roles:
            other = "bob" if role == "alice" else "alice"
            claimed[role] = await start_and_run(role)
            assert claimed[role]["id"] in members[role], (claimed[role], members)
            assert claimed[role]["claimed"], claimed[role]
            # Her claim took nothing of his: his member is still there, unclaimed.
            if other == "bob":
                assert members["bob"] <= members_of(gateway_hub, names["bob"])
        for role in roles:
            name = names[role]
            labelled = all_owner_labels([name])
            assert set(labelled.values()) == {name}, labelled
            assert f"jupyter-sandbox-{claimed[role]['id']}" in labelled
            # The refill made a new member; quotas count the two kernels' sandboxes, not it.
            wait_for_members(gateway_hub, name)
            usage = usage_of(gateway_hub.gateway_state, name)
            assert usage.sandboxes == 2, usage
        observe("each user's second kernel claimed their own member; usage 2 and 2", cases=2)
    finally:
        for role in roles:
            for kernel_id in kernels[role]:
                gateway_hub.server(role, "DELETE", f"api/kernels/{kernel_id}")
    assert wait_until_no_sandboxes(list(names.values())) == {}


def test_labs_sandboxes_panel_shows_the_gateways_sandboxes(
    gateway_hub: GatewayHub, page: Any
) -> None:
    """Alice logs in to the hub in a browser and opens her Lab: its Sandboxes panel lists the
    sandbox her server made at the gateway (the list forwarded with her server's token)."""
    from playwright.sync_api import expect

    alice = gateway_hub.users["alice"]
    status, sandbox = gateway_hub.server("alice", "POST", "api/sandboxes", {"runtime": "runc"})
    assert status == 201, sandbox
    try:
        page.goto(f"{gateway_hub.url}/hub/login?next=/user/{alice}/lab")
        page.locator("input[name=username]").fill(alice)
        page.locator("input[name=password]").fill("any")  # DummyAuthenticator
        page.locator("input[type=submit]").click()
        open_panel(page)
        card = sandbox_card(page, sandbox["id"])
        expect(card).to_be_visible()
        shot(page, "gateway-sandboxes-panel")
        assert page.locator("#jupyter-sandbox-panel .jp-Sandbox-card").count() == 1
    finally:
        status, answer = gateway_hub.server("alice", "DELETE", f"api/sandboxes/{sandbox['id']}")
    assert status == 204, answer
    assert wait_until_no_sandboxes([alice]) == {}
