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
import os
import shutil
from pathlib import Path

import docker
import pytest
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from jupyter_sandbox.sandbox import labels
from tests.hub.hub_process import (
    KERNEL_TIMEOUT,
    REQUEST_TIMEOUT,
    STATE,
    Hub,
    file_of_user,
    home_of,
    owners_containers,
    uid_of,
    wait_until_no_containers,
)
from tests.kernel_websocket import run_cell

pytestmark = [
    pytest.mark.integration,
    pytest.mark.runc,
    pytest.mark.skipif(os.geteuid() != 0, reason="the hub makes host users and runs as root"),
]


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
        client = docker.from_env(version="auto")
        container = client.containers.get(labels.container_name(sandbox_id))
        assert container.labels[labels.OWNER] == alice
        assert Path(container.labels[labels.HOST_DIR]).parent == home_of(alice) / STATE
        assert owners_containers([bob]) == []

        # Whom the hub lets into her server (access:servers; here the admin service) acts there
        # as her, its owner, as her kernels do: it sees and runs in her sandbox, and what it
        # makes there is hers. Bob, not let in, is refused by the hub before any of it.
        in_hers = f"user/{alice}/api/sandboxes"
        status, listed = hub.request("GET", in_hers, hub.admin_token)
        assert status == 200, listed
        assert [(s["id"], s["owner"]) for s in listed] == [(sandbox_id, alice)]
        run_there = f"{in_hers}/{sandbox_id}/execute"
        status, run = hub.request("POST", run_there, hub.admin_token, {"code": "print(6 * 7)"})
        assert (status, run["stdout"]) == (200, "42\n"), run
        status, made = hub.request("POST", in_hers, hub.admin_token, {"runtime": "runc"})
        assert status == 201, made
        try:
            assert made["owner"] == alice
            made_container = client.containers.get(labels.container_name(made["id"]))
            assert made_container.labels[labels.OWNER] == alice
        finally:
            status, answer = hub.request("DELETE", f"{in_hers}/{made['id']}", hub.admin_token)
        assert status == 204, answer
        status, answer = hub.request("GET", in_hers, hub.tokens[bob])
        assert status == 403, answer
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


# A jupyter_sandbox_config.py in a user's home: what it sets is seen inside a sandbox (its
# environment) and on its container (its memory limit).
FROM_THE_HOME = """\
c.SandboxSettings.environment = {"FROM_THE_HOME": "read"}
c.SandboxSettings.memory_limit = "300m"
"""


async def test_a_sandboxed_python_kernel_through_the_hub(hub: Hub) -> None:
    alice = hub.users["alice"]
    # Config files in her home are Python her server and kernels would run on the host, and
    # hers to write: the example's Spawner.disable_user_config has the kernel ignore them too.
    with file_of_user(alice, ".jupyter/jupyter_sandbox_config.py", FROM_THE_HOME):
        status, kernel = hub.server("alice", "POST", "api/kernels", {"name": "sandboxed-python"})
        assert status == 201, kernel
        try:
            await _check_the_kernel_of(hub, alice, kernel["id"])
        finally:
            status, answer = hub.server("alice", "DELETE", f"api/kernels/{kernel['id']}")
        assert status == 204, answer
    # The kernel's own sandbox goes with it.
    assert wait_until_no_containers([alice]) == []


async def _check_the_kernel_of(hub: Hub, alice: str, kernel_id: str) -> None:
    ws_url = f"{hub.url.replace('http', 'ws', 1)}/user/{alice}/api/kernels/{kernel_id}/channels"
    connection = await asyncio.wait_for(
        websocket_connect(
            HTTPRequest(ws_url, headers={"Authorization": f"token {hub.tokens[alice]}"})
        ),
        timeout=REQUEST_TIMEOUT,
    )
    try:
        code = "import os; print(os.getuid(), 6 * 7, os.environ.get('FROM_THE_HOME'))"
        stdout, reply = await run_cell(connection, code, KERNEL_TIMEOUT)
    finally:
        connection.close()
    assert reply["status"] == "ok", reply
    assert stdout == f"{uid_of(alice)} 42 None\n"  # her uid; not her home's config

    # Its sandbox: listed by her server with the kernel attached, hers, not Bob's.
    status, listed = hub.server("alice", "GET", "api/sandboxes")
    assert status == 200, listed
    attached = [s for s in listed if s["kernel"]["id"] == kernel_id]
    assert len(attached) == 1, listed
    assert attached[0]["owner"] == alice
    container = docker.from_env(version="auto").containers.get(
        labels.container_name(attached[0]["id"])
    )
    assert container.labels[labels.OWNER] == alice
    assert container.attrs["HostConfig"]["Memory"] != 300 * 2**20
    assert hub.server("bob", "GET", "api/sandboxes") == (200, [])
