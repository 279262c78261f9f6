"""Rows 33, 34 and 37 through the REST API: host paths and runtime flags from request bodies, and
one user reaching another's sandbox through every route."""

from __future__ import annotations

import ast
import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_sandbox.sandbox.doctor import MIN_DOCKER, version_tuple
from jupyter_sandbox.server_extension import SandboxExtension
from tests.kernel_client import output_of
from tests.server_extension.conftest import Fetch, api
from tests.server_extension.test_auth_and_spec import routes, with_named_users
from tests.server_extension.test_terminals import UPGRADE

pytestmark = pytest.mark.integration

ALICE = {"headers": {"Authorization": "token alice"}}
BOB = {"headers": {"Authorization": "token bob"}}


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    return {
        **with_named_users(jp_server_config),
        "SandboxExtension": {**jp_server_config["SandboxExtension"], "fast_kernel_start": False},
    }


async def nothing_was_made(extension: SandboxExtension) -> bool:
    return await extension.manager.list_sandboxes("alice") == []


# Commands that would leave a mark in alice's sandbox, were they run there (looked for below).
REACHED = "/workspace/reached_by_bob"
VALID_BODIES = {
    ("/api/sandboxes/{sandbox_id}/network", "put"): '{"mode": "none"}',
    ("/api/sandboxes/{sandbox_id}/network/requests/{request_id}", "post"): '{"decision": "once"}',
    ("/api/sandboxes/{sandbox_id}/commands", "post"): (
        '{"command": "touch ' + REACHED + '", "env": {"A": "1"}, "cwd": "/workspace"}'
    ),
    ("/api/sandboxes/{sandbox_id}/timeout", "put"): '{"timeout": 600}',
    # Code that would leave a mark in alice's interpreter, were it run there (looked for below).
    ("/api/sandboxes/{sandbox_id}/execute", "post"): '{"code": "reached_by_bob = True"}',
    ("/api/sandboxes/{sandbox_id}/files", "put"): '{"type": "directory"}',
    ("/api/sandboxes/{sandbox_id}/files", "patch"): '{"path": "moved.txt", "overwrite": true}',
}
# Routes tried again with other bodies: a command started in the background as well as one
# run to its end.
MORE_BODIES = {
    ("/api/sandboxes/{sandbox_id}/commands", "post"): [
        '{"command": "touch ' + REACHED + '", "background": true}'
    ],
}
# Routes that take a query argument: a well-formed one, so that only the owner decides.
VALID_QUERIES = {
    "/api/sandboxes/{sandbox_id}/files": {"path": "notes.txt"},
    "/api/sandboxes/{sandbox_id}/files/content": {"path": "notes.txt"},
    "/api/sandboxes/{sandbox_id}/files/info": {"path": "notes.txt"},
    "/api/sandboxes/{sandbox_id}/files/watch": {"path": ".", "recursive": "true"},
    "/api/sandboxes/{sandbox_id}/terminal": {"rows": "24", "cols": "80"},
    "/api/sandboxes/{sandbox_id}/commands/{command_id}/output": {"offset": "0", "limit": "1024"},
}
# The terminal is a WebSocket: asked for as a WebSocket client asks, with everything else
# well-formed, so that only the owner decides (as an upgrade, it would never answer).
VALID_HEADERS = {"/api/sandboxes/{sandbox_id}/terminal": UPGRADE}

HOST_PATH_REQUESTS = [
    {"mounts": [{"source": "/", "target": "/host"}]},
    {"volumes": {"/root/.ssh": {"bind": "/workspace/ssh"}}},
    {"binds": ["/var/run/docker.sock:/var/run/docker.sock"]},
    {"workspace": "/etc"},
    {"launch_dir": "/root"},
    {"host_dir": "/tmp"},
    {"image": "/var/lib/docker"},
    {"image": "debian:12"},
    {"context": "../../bob/ctx"},
    {"context": "/etc/passwd"},
]


@pytest.mark.checklist(
    row=33,
    attack="request bodies granting themselves host paths: mounts, volumes, binds, a workspace "
    "or launch directory, a host path or foreign image as the image, a traversing context",
    expected="each refused with a 400 naming the field; nothing created",
)
async def test_row33_requests_cannot_grant_host_paths(
    jp_fetch: Fetch, extension: SandboxExtension, observe: Callable[[str], None]
) -> None:
    for body in HOST_PATH_REQUESTS:
        status, error = await api(jp_fetch, "POST", body=body, **ALICE)
        assert status == 400, (body, error)
        assert error["message"], body
    assert await nothing_was_made(extension)
    observe(
        f"{len(HOST_PATH_REQUESTS)} bodies tried, each answered 400; no sandbox made",
        cases=len(HOST_PATH_REQUESTS),
    )


RUNTIME_FLAG_REQUESTS = [
    {"runtime": "runsc --host-uds=all"},
    {"runtime": "runc --privileged"},
    {"runtime": "runsc-debug"},
    {"annotations": {"dev.gvisor.flag.host-uds": "all"}},
    {"labels": {"io.jupyter-sandbox.owner": "bob"}},
    {"limits": {"memory": "1g --privileged"}},
    {"limits": {"cpus": "1; rm -rf /"}},
    {"image": "--privileged"},
    {"environment": {"A B": "1"}},
    {"privileged": True},
    {"cap_add": ["SYS_ADMIN"]},
    {"network_mode": "host"},
    {"security_opt": ["seccomp=unconfined"]},
]


@pytest.mark.checklist(
    row=34,
    attack="user input reaching runtime flags: runtime names with flags, OCI annotations, "
    "labels, limits with flags, privileged, capabilities, host network, seccomp off",
    expected="refused with a 400; a sandbox made from a valid request runs with the fixed "
    "hardening and no annotations",
)
async def test_row34_user_input_never_reaches_runtime_flags(
    jp_fetch: Fetch, extension: SandboxExtension, observe: Callable[[str], None]
) -> None:
    for body in RUNTIME_FLAG_REQUESTS:
        status, error = await api(jp_fetch, "POST", body=body, **ALICE)
        assert status == 400, (body, error)
    assert await nothing_was_made(extension)
    status, made = await api(jp_fetch, "POST", body={"environment": {"X": "--privileged"}}, **ALICE)
    assert status == 201, made
    engine = extension.manager.backend.engine.client.api  # type: ignore[attr-defined]
    inspected = engine.inspect_container(f"jupyter-sandbox-{made['id']}")
    host = inspected["HostConfig"]
    assert host["Privileged"] is False
    assert not host.get("CapAdd")
    assert host["CapDrop"] == ["ALL"] or "ALL" in host["CapDrop"]
    assert host["NetworkMode"] == "none"
    assert host["ReadonlyRootfs"] is True
    assert "no-new-privileges" in " ".join(host.get("SecurityOpt") or [])
    assert not host.get("Annotations")
    assert host["Runtime"] in ("runc", "runsc")
    assert inspected["Config"]["Labels"]["io.jupyter-sandbox.owner"] == "alice"
    observe(
        f"{len(RUNTIME_FLAG_REQUESTS)} bodies tried, each answered 400; a valid sandbox runs "
        "unprivileged, CapDrop ALL, no-new-privileges, network none, read-only root, no annotations",
        cases=len(RUNTIME_FLAG_REQUESTS),
    )


@pytest.mark.checklist(
    row=37,
    attack="user B reaching user A's sandbox through every REST route, and A's files and "
    "sockets from inside B's sandbox",
    expected="404 on every route, A's sandbox untouched; B's sandbox sees only its own directory",
)
async def test_row37_users_never_reach_each_other(
    jp_fetch: Fetch, jp_base_url: str, extension: SandboxExtension, observe: Callable[[str], None]
) -> None:
    status, alices = await api(jp_fetch, "POST", body={}, **ALICE)
    assert status == 201, alices
    status, bobs = await api(jp_fetch, "POST", body={}, **BOB)
    assert status == 201, bobs
    # A background command of alice's, for the routes of one (bob must neither see nor stop it).
    body = {"command": "sleep 600", "background": True}
    status, alices_command = await api(
        jp_fetch, "POST", alices["id"], "commands", body=body, **ALICE
    )
    assert status == 201, alices_command

    tried = 0
    for path, method in sorted(routes()):
        if "{sandbox_id}" not in path:
            continue
        concrete = path.replace("{sandbox_id}", alices["id"])
        concrete = concrete.replace("{port}", "8000")
        concrete = concrete.replace("{request_id}", "0123456789abcdef")
        parts = concrete.replace("{command_id}", alices_command["id"]).split("/")[3:]
        # A well-formed request each (a malformed one is refused before any lookup, with a 400
        # that says as little about whose sandbox it is).
        bodies: list[str | None] = [None]
        if method in ("post", "put", "patch"):
            bodies = [VALID_BODIES.get((path, method), "{}"), *MORE_BODIES.get((path, method), [])]
        params = VALID_QUERIES.get(path, {})
        headers = {**BOB["headers"], **VALID_HEADERS.get(path, {})}
        for body in bodies:
            status, error = await api(
                jp_fetch, method.upper(), *parts, body=body, params=params, headers=headers
            )
            assert status == 404, (method, path, body, status, error)
            tried += 1
    # Bob's link to a port of his own sandbox, pointed at alice's, leads nowhere: its token
    # binds the owner, the sandbox and the port (nothing listens there, but a 502 would tell).
    status, bobs_link = await api(jp_fetch, "GET", bobs["id"], "ports", "8000", **BOB)
    assert status == 200, bobs_link
    forged = bobs_link["url"].replace(bobs["id"], alices["id"])
    with pytest.raises(HTTPClientError) as refused:
        await jp_fetch(forged[len(jp_base_url) :])
    assert refused.value.code == 404
    tried += 1
    assert extension.manager.terminals.open_count(alices["id"]) == 0  # no shell was started
    # No file of bob's was written, no directory made, nothing moved in alice's workspace.
    assert (await extension.manager.files.list("alice", alices["id"]))["entries"] == []
    ran = await extension.manager.exec(
        "alice", alices["id"], ["sh", "-c", "cat /proc/[0-9]*/cmdline"]
    )
    assert b"sandbox-init" in ran.stdout  # the listing works
    assert b"bash" not in ran.stdout
    # Bob's commands ran in alice's sandbox neither to their end nor in the background, and
    # hers still runs, alone.
    reached = await extension.manager.exec("alice", alices["id"], ["test", "-e", REACHED])
    assert reached.exit_code == 1
    status, listed = await api(jp_fetch, "GET", alices["id"], "commands", **ALICE)
    assert status == 200, listed
    assert [(c["id"], c["running"]) for c in listed["commands"]] == [(alices_command["id"], True)]
    # Nor did bob's code run in alice's interpreter (the execute route's body sets a name).
    status, result = await api(
        jp_fetch,
        "POST",
        alices["id"],
        "execute",
        body={"code": "'reached_by_bob' in dir()"},
        **ALICE,
    )
    assert (status, result["outputs"][0]["data"]["text/plain"]) == (200, "False"), result
    status, listed = await api(jp_fetch, "GET", **BOB)
    assert [s["id"] for s in listed] == [bobs["id"]]
    status, alice_now = await api(jp_fetch, "GET", alices["id"], **ALICE)
    assert (status, alice_now["status"]) == (200, "running")

    state = extension.manager.settings.state_path
    assert (state / alices["id"]).stat().st_mode & 0o077 == 0  # 0700: no other host user
    sandbox = await extension.manager.attach("bob", bobs["id"])
    seen = ast.literal_eval(
        await output_of(
            sandbox.connection_info,
            "import os\n"
            f"print({{'own': sorted(os.listdir('/run/sandbox')), "
            f"'alice': os.path.exists({json.dumps(str(state / alices['id']))})}})",
        )
    )
    assert not seen["alice"]
    assert all(not name.startswith(alices["id"]) for name in seen["own"])
    observe(
        f"{tried} requests to sandbox routes tried as another user (a background command's "
        "start, look, output and stop among them, and the user's own port link pointed at the "
        "victim's sandbox): all 404, no shell started by the "
        "terminal's, no code run in its interpreter by execute's, no command run or started "
        "by the commands', no file written, directory made or path moved in its workspace by "
        "the files', the victim's background command still running and its only one; "
        "the victim kept running; its host directory is 0700 and not visible from the other "
        "sandbox",
        cases=tried,
    )


@pytest.mark.checklist(
    row=37,
    attack="a terminal WebSocket opened without a token, with a wrong one, by a user the "
    "authorizer refuses, or to another user's sandbox",
    expected="refused before the upgrade (403, or 404 for another user's sandbox); no shell "
    "started",
)
async def test_row37_a_terminal_websocket_needs_its_owner(
    jp_fetch: Fetch,
    jp_ws_fetch: Any,
    extension: SandboxExtension,
    observe: Callable[[str], None],
) -> None:
    status, alices = await api(jp_fetch, "POST", body={}, **ALICE)
    assert status == 201, alices
    parts = ("api", "sandboxes", alices["id"], "terminal")
    refusals = {
        "no token": ({"Authorization": ""}, 403),
        "a wrong token": ({"Authorization": "token wrong"}, 403),
        "a user without access to sandboxes": ({"Authorization": "token mallory"}, 403),
        "another user": (BOB["headers"], 404),
    }
    for case, (headers, expected) in refusals.items():
        with pytest.raises(HTTPClientError) as refused:
            await jp_ws_fetch(*parts, headers=dict(headers))
        assert refused.value.code == expected, case
    assert extension.manager.terminals.open_count(alices["id"]) == 0
    ran = await extension.manager.exec(
        "alice", alices["id"], ["sh", "-c", "cat /proc/[0-9]*/cmdline"]
    )
    assert b"sandbox-init" in ran.stdout  # the listing works
    assert b"bash" not in ran.stdout
    # The owner gets the shell: the refusals above were the caller's, not the route's.
    ws = await jp_ws_fetch(*parts, headers=dict(ALICE["headers"]))
    assert json.loads(await ws.read_message()) == ["setup", {}]
    ws.close()
    observe(
        f"{len(refusals)} refused openings (no token, a wrong token, an unauthorized user: 403; "
        "another user: 404); no shell started; the owner's opening works",
        cases=len(refusals),
    )


@pytest.mark.checklist(
    row=39,
    attack="an outdated container engine or runc (Docker < 26.0.0, runc < 1.2.8)",
    expected="a warning naming the fix in the server's log at start (and in the doctor)",
)
async def test_row39_an_outdated_runtime_is_reported_at_start(
    jp_serverapp: Any,
    extension: SandboxExtension,
    caplog: pytest.LogCaptureFixture,
    observe: Callable[[str], None],
) -> None:
    await extension._start_jupyter_server_extension(jp_serverapp)  # what the server does
    facts = await extension.manager.backend.engine_facts()
    outdated = version_tuple(facts.version) < MIN_DOCKER
    warnings: list[str] = []
    for _ in range(100):  # the check runs in the background from the server's start
        warnings = [r.getMessage() for r in caplog.records if "sandbox isolation" in r.getMessage()]
        if warnings or not outdated:
            break
        await asyncio.sleep(0.1)
    docker_warned = any(f"Docker {facts.version} predates 26.0.0" in w for w in warnings)
    assert docker_warned == outdated, warnings
    observe(
        f"Docker {facts.version} on this machine: "
        + ("; ".join(warnings) if warnings else "current, no warning")
    )
