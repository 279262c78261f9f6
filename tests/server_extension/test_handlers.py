"""Every route of /api/sandboxes against a real server and a real engine."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest
import zmq
from jupyter_client.blocking.client import BlockingKernelClient

from jupyter_sandbox.sandbox.manager import default_owner
from jupyter_sandbox.server_extension import SandboxExtension
from tests.server_extension.conftest import Fetch, api

pytestmark = pytest.mark.integration


async def create(fetch: Fetch, **body: Any) -> dict[str, Any]:
    status, model = await api(fetch, "POST", body=body)
    assert status == 201, model
    return dict(model)


def kernel_client(extension: SandboxExtension, sandbox_id: str) -> BlockingKernelClient:
    directory = extension.manager.settings.state_path / sandbox_id / "io"
    info = json.loads((directory / "kernel.json").read_text())
    generation = extension.manager.read_state(sandbox_id).get("generation", 0)
    prefix = "kernel" if not generation else f"kernel-g{generation}"
    client = BlockingKernelClient()
    client.load_connection_info({**info, "ip": str(directory / prefix)})
    client.start_channels()
    client.wait_for_ready(timeout=30)
    return client


def evaluate(client: BlockingKernelClient, code: str, expression: str) -> str:
    reply = client.execute_interactive(code, timeout=30, user_expressions={"v": expression})
    result = reply["content"]["user_expressions"]["v"]
    return str(result["data"]["text/plain"] if result["status"] == "ok" else result["ename"])


async def test_create_get_list_delete(jp_fetch: Fetch, jp_base_url: str) -> None:
    status, listed = await api(jp_fetch, "GET")
    assert (status, listed) == (200, [])

    response = await jp_fetch(
        "api", "sandboxes", method="POST", body='{"limits": {"memory": "512m"}, "context": "c1"}'
    )
    assert response.code == 201
    created = json.loads(response.body)
    sandbox_id = created["id"]
    assert response.headers["Location"] == f"{jp_base_url}api/sandboxes/{sandbox_id}"
    assert created["status"] == "running"
    assert created["runtime"] == "runc"
    assert created["context"] == "c1"
    assert created["limits"]["memory"] == 512 * 1024**2
    assert created["kernel"] == {"attached": False, "id": None, "notebook": None, "since": None}

    status, got = await api(jp_fetch, "GET", sandbox_id)
    assert status == 200
    assert got["id"] == sandbox_id
    status, listed = await api(jp_fetch, "GET")
    assert [s["id"] for s in listed] == [sandbox_id]

    status, error = await api(jp_fetch, "POST", body={"context": "c1"})
    assert status == 409
    assert sandbox_id in error["message"]

    status, _ = await api(jp_fetch, "DELETE", sandbox_id)
    assert status == 204
    status, error = await api(jp_fetch, "GET", sandbox_id)
    assert status == 404
    assert error["code"] == "sandbox_not_found"
    status, _ = await api(jp_fetch, "DELETE", sandbox_id)
    assert status == 404


async def test_pause_resume_restart(jp_fetch: Fetch, extension: SandboxExtension) -> None:
    sandbox_id = (await create(jp_fetch))["id"]
    client = kernel_client(extension, sandbox_id)
    try:
        assert evaluate(client, "x = 42; open('/workspace/kept', 'w').write('yes')", "x") == "42"
    finally:
        client.stop_channels()

    status, model = await api(jp_fetch, "POST", sandbox_id, "pause")
    assert (status, model["status"]) == (200, "paused")
    status, error = await api(jp_fetch, "POST", sandbox_id, "restart")
    assert (status, error["message"]) == (409, f"sandbox {sandbox_id} is paused: resume it first")
    status, model = await api(jp_fetch, "POST", sandbox_id, "resume")
    assert (status, model["status"]) == (200, "running")

    status, model = await api(jp_fetch, "POST", sandbox_id, "restart")
    assert (status, model["status"]) == (200, "running")
    client = kernel_client(extension, sandbox_id)
    try:
        # A fresh interpreter: x is gone, the file in /workspace stayed.
        assert evaluate(client, "", "'x' in globals()") == "False"
        assert evaluate(client, "", "open('/workspace/kept').read()") == "'yes'"
    finally:
        client.stop_channels()


@pytest.mark.parametrize(
    ("body", "code", "says"),
    [
        ("{not json", "invalid_request", "not valid JSON"),
        ("[1, 2]", "invalid_request", "must be a JSON object"),
        ('{"colour": "red"}', "invalid_request", "unknown field(s) 'colour'"),
        ('{"runtime": 3}', "invalid_request", "runtime must be a string"),
        ('{"runtime": "kata"}', "invalid_request", "runtime must be one of runsc, runc"),
        ('{"limits": "big"}', "invalid_request", "limits must be an object"),
        ('{"limits": {"gpus": 1}}', "invalid_request", "unknown field(s) 'gpus' for limits"),
        ('{"limits": {"pids": "many"}}', "invalid_request", "limits.pids must be an integer"),
        ('{"limits": {"cpus": true}}', "invalid_request", "limits.cpus must be"),
        ('{"limits": {"memory": "1m"}}', "invalid_setting", "below the minimum"),
        ('{"limits": {"memory": "lots"}}', "invalid_setting", "must be a size such as"),
        ('{"limits": {"cpus": 1000}}', "invalid_setting", "cpus must be between"),
        ('{"limits": {"pids": 1}}', "invalid_setting", "pids limit must be between"),
        ('{"context": "../etc"}', "invalid_setting", "context id '../etc' is invalid"),
        ('{"environment": {"A": 1}}', "invalid_request", "environment must be an object"),
        ('{"environment": {"1A": "x"}}', "invalid_request", "environment key '1A' must be a"),
        ('{"environment": {"A": "a\\u0000b"}}', "invalid_request", "may not hold a NUL"),
        (json.dumps({"environment": {"A": "x" * (32 * 1024 + 1)}}), "invalid_request", "32768"),
        (json.dumps({"environment": {f"A{i}": "" for i in range(257)}}), "invalid_request", "256"),
        (
            json.dumps({"environment": {f"A{i}": "x" * 32 * 1024 for i in range(8)}}),
            "invalid_request",
            "at most 262144 together",
        ),
        ('{"image": "jupyter-sandbox/no-such:1"}', "image_not_found", "jupyter-sandbox/no-such:1"),
        ('{"image": "debian:12"}', "invalid_setting", "image 'debian:12' is not allowed here"),
        ('{"timeout": "soon"}', "invalid_request", "timeout must be a number of seconds"),
        ('{"timeout": 0}', "invalid_request", "timeout must be a number of seconds above 0"),
        ('{"timeout": true}', "invalid_request", "timeout must be a number of seconds"),
        ('{"timeout": 90000}', "invalid_request", "outlast the server's time to live"),
        ('{"metadata": ["a"]}', "invalid_request", "metadata must be an object of string"),
        ('{"metadata": {"a": 1}}', "invalid_request", "metadata must be an object of string"),
        ('{"metadata": {"no space": "x"}}', "invalid_request", "metadata key 'no space' must"),
        ('{"metadata": {"a": "' + "x" * 1025 + '"}}', "invalid_request", "at most 1024"),
        (json.dumps({"metadata": {f"k{i}": "" for i in range(65)}}), "invalid_request", "64"),
        (
            json.dumps({"metadata": {f"k{i}": "\u00e9" * 1024 for i in range(64)}}),
            "invalid_request",
            "at most 73728 together",
        ),
    ],
)
async def test_bad_input_is_refused_with_what_to_fix(
    jp_fetch: Fetch, extension: SandboxExtension, body: str, code: str, says: str
) -> None:
    status, error = await api(jp_fetch, "POST", body=body)
    assert status == 400, error
    assert error["code"] == code
    assert says in error["message"]
    # Nothing was started, nothing half-made left behind.
    assert await extension.manager.list_sandboxes(default_owner()) == []
    assert not any(extension.manager.settings.state_path.glob("[0-9a-f]*"))


async def test_metadata_is_kept_shown_and_matched(jp_fetch: Fetch) -> None:
    planner = await create(jp_fetch, metadata={"agent": "planner", "task": "t-42"})
    coder = await create(jp_fetch, metadata={"agent": "coder", "task": "t-42"})
    plain = await create(jp_fetch)
    assert planner["metadata"] == {"agent": "planner", "task": "t-42"}
    assert plain["metadata"] == {}
    _, got = await api(jp_fetch, "GET", planner["id"])
    assert got["metadata"] == planner["metadata"]

    async def ids(*filters: str) -> set[str]:
        query = [("metadata", wanted) for wanted in filters]  # a repeated query argument
        status, listed = await api(jp_fetch, "GET", params=query)
        assert status == 200, listed
        return {sandbox["id"] for sandbox in listed}

    assert await ids() == {planner["id"], coder["id"], plain["id"]}
    assert await ids("task=t-42") == {planner["id"], coder["id"]}
    assert await ids("task=t-42", "agent=coder") == {coder["id"]}
    assert await ids("agent=nobody") == set()
    status, error = await api(jp_fetch, "GET", params={"metadata": "agent"})
    assert status == 400
    assert "must be KEY=VALUE" in error["message"]


async def test_a_timeout_sets_and_moves_the_deadline(
    jp_fetch: Fetch, extension: SandboxExtension
) -> None:
    before = datetime.datetime.now(datetime.timezone.utc)
    sandbox = await create(jp_fetch, timeout=600)
    expires = datetime.datetime.fromisoformat(sandbox["expires"])
    assert 599 <= (expires - before).total_seconds() <= 602
    # Without a timeout of its own, the server's time to live is its deadline.
    plain = await create(jp_fetch)
    ttl_end = datetime.datetime.fromisoformat(plain["expires"])
    assert abs((ttl_end - before).total_seconds() - extension.culler.ttl) < 60

    status, moved = await api(jp_fetch, "PUT", sandbox["id"], "timeout", body={"timeout": 3600})
    assert status == 200, moved
    assert (datetime.datetime.fromisoformat(moved["expires"]) - expires).total_seconds() > 2990
    status, error = await api(jp_fetch, "PUT", plain["id"], "timeout", body={"timeout": 90000})
    assert status == 400
    assert "at most" in error["message"]
    assert "SandboxCuller.ttl" in error["message"]
    for body, says in [
        ({}, "the body needs timeout"),
        ({"timeout": -5}, "above 0"),
        ({"timeout": 5, "when": "now"}, "unknown field(s) 'when'"),
    ]:
        status, error = await api(jp_fetch, "PUT", sandbox["id"], "timeout", body=body)
        assert (status, error["code"]) == (400, "invalid_request"), error
        assert says in error["message"]
    status, error = await api(jp_fetch, "PUT", "0123456789ab", "timeout", body={"timeout": 5})
    assert status == 404
    # Refused requests changed nothing.
    _, after = await api(jp_fetch, "GET", sandbox["id"])
    assert after["expires"] == moved["expires"]


@pytest.mark.parametrize("path", ["nothex", "0123456789ab", "0123456789ab/pause"])
async def test_unknown_sandbox_is_not_found(jp_fetch: Fetch, path: str) -> None:
    method = "POST" if path.endswith("pause") else "GET"
    status, error = await api(jp_fetch, method, *path.split("/"))
    assert status == 404
    assert error["code"] == "sandbox_not_found"


async def test_quota_breach_names_the_quota(jp_fetch: Fetch, extension: SandboxExtension) -> None:
    extension.manager.quotas.max_sandboxes = 1
    await create(jp_fetch)
    status, error = await api(jp_fetch, "POST", body={})
    assert status == 403
    assert error["code"] == "quota_exceeded"
    assert "max_sandboxes" in error["message"]
    extension.manager.quotas.max_sandboxes = 0
    extension.manager.quotas.max_memory = "1g"
    status, error = await api(jp_fetch, "POST", body={"limits": {"memory": "768m"}})
    assert status == 403
    assert "max_memory" in error["message"]
    extension.manager.quotas.max_memory = ""
    extension.manager.quotas.max_cpus = 1.5
    status, error = await api(jp_fetch, "POST", body={"limits": {"cpus": 1}})
    assert status == 403
    assert "max_cpus" in error["message"]
    # The refused starts left nothing: one sandbox, as before.
    status, listed = await api(jp_fetch, "GET")
    assert len(listed) == 1


async def test_a_notebook_kernel_is_listed_and_restarted_as_lab_does(
    kernel_env: dict[str, str], jp_fetch: Fetch, jp_serverapp: Any, extension: SandboxExtension
) -> None:
    session = {"path": "analysis.ipynb", "type": "notebook", "kernel": {"name": "sandboxed-python"}}
    response = await jp_fetch("api", "sessions", method="POST", body=json.dumps(session))
    kernel_id = json.loads(response.body)["kernel"]["id"]
    client = jp_serverapp.kernel_manager.get_kernel(kernel_id).client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=120)
        _, listed = await api(jp_fetch, "GET")
        [model] = listed
        assert model["kernel"]["attached"] is True
        assert model["kernel"]["id"] == kernel_id
        assert model["kernel"]["notebook"] == "analysis.ipynb"
        assert model["ephemeral"] is True
        assert model["context"] is None

        reply = await client.execute_interactive("x = 42", timeout=30)
        assert reply["content"]["status"] == "ok"
        status, after = await api(jp_fetch, "POST", model["id"], "restart")
        assert (status, after["id"]) == (200, model["id"])
        await client.wait_for_ready(timeout=120)
        reply = await client.execute_interactive(
            "", timeout=30, user_expressions={"v": "'x' in globals()"}
        )
        assert reply["content"]["user_expressions"]["v"]["data"]["text/plain"] == "False"
    finally:
        client.stop_channels()
        await jp_fetch("api", "kernels", kernel_id, method="DELETE")
    # The kernel's own sandbox went with it.
    assert await api(jp_fetch, "GET") == (200, [])


@pytest.mark.parametrize("runtime", ["runc", pytest.param("runsc", marks=pytest.mark.runsc)])
async def test_stats_and_attestation(jp_fetch: Fetch, runtime: str) -> None:
    sandbox_id = (await create(jp_fetch, runtime=runtime, limits={"memory": "512m"}))["id"]

    status, stats = await api(jp_fetch, "GET", sandbox_id, "stats")
    assert status == 200
    assert 0 < stats["memory_bytes"] <= stats["memory_limit_bytes"] == 512 * 1024**2
    assert stats["pids"] >= 1
    assert stats["workspace_bytes"] >= 0

    status, report = await api(jp_fetch, "GET", sandbox_id, "attestation")
    assert status == 200
    assert report["ok"] is True, report["findings"]
    kernel = report["measured"]["kernel"]["value"]
    assert kernel == ("gvisor" if runtime == "runsc" else "host")
    assert report["measured"]["uid"]["value"] == 10001
    assert "egress blocked" in report["summary"]


def test_the_server_reaches_a_kernel_soon_after_it_binds(
    jp_serverapp: Any, extension: SandboxExtension
) -> None:
    context = jp_serverapp.kernel_manager.context
    with context.socket(zmq.DEALER) as sock:
        assert sock.getsockopt(zmq.RECONNECT_IVL) == 100  # ZMQ's default, before the extension
    extension._tune_kernel_connections(jp_serverapp)
    # Every socket the server makes for a kernel from now on retries every 10 ms, up to 1 s.
    with context.socket(zmq.DEALER) as sock:
        assert sock.getsockopt(zmq.RECONNECT_IVL) == 10
        assert sock.getsockopt(zmq.RECONNECT_IVL_MAX) == 1000
