"""Egress from real sandboxes on both runtimes: none, allowlist, open, live changes, audit.

Security checklist rows 14-24 (see each test's docstring). One sandbox per runtime is shared by
the module (each test first sets the policy it needs, through the same call the REST API uses),
so the kernel inside also proves that policy changes never cost it its state. Test servers
listen on the host's 127.0.0.1 (and 127.0.0.2) only, reached through the test-only settings
``allow_loopback_for_tests`` and ``test_host_addresses``; the only other targets are
documentation addresses (192.0.2.0/24), metadata and private addresses that the sandbox cannot
route to and the proxy refuses, so no test sends traffic anywhere else.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from jupyter_sandbox.sandbox import Sandbox, SandboxManager
from jupyter_sandbox.sandbox.hostdir import SandboxDirectory
from jupyter_sandbox.sandbox.network import proxy_running
from jupyter_sandbox.sandbox.network.control import PROXY_LOCK
from jupyter_sandbox.sandbox.process_lock import ProcessLock

from ...conftest import manager_config, purpose_label, remove_everything_under
from ...kernel_client import execute
from .servers import RecordingServer, recording_server

pytestmark = pytest.mark.asyncio(loop_scope="module")
OWNER = "alice"
NO_ROUTE = ("ENETUNREACH", "EHOSTUNREACH")  # runc says the first, gVisor the second

HELPERS = r"""
import errno, json, socket, urllib.error, urllib.request, http.client
def fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return [r.status, r.read().decode()[:200]]
    except urllib.error.HTTPError as e:
        return [e.code, e.headers.get("X-Jupyter-Sandbox-Denied") or e.read().decode()[:200]]
    except Exception as e:
        return [-1, f"{type(e).__name__}: {e}"]
def connect_through(host, port):
    conn = http.client.HTTPConnection("127.0.0.1", 3128, timeout=30)
    conn.set_tunnel(host, port)
    try:
        conn.request("GET", "/")
        r = conn.getresponse()
        return [r.status, r.read().decode()[:200]]
    except OSError as e:
        return [-1, f"{type(e).__name__}: {e}"]
def raw(family, kind, address):
    s = socket.socket(family, kind)
    s.settimeout(5)
    try:
        if kind == socket.SOCK_DGRAM:
            s.sendto(b"x", address)
            s.recv(10)
        else:
            s.connect(address)
        return "connected"
    except OSError as e:
        return errno.errorcode.get(e.errno, type(e).__name__)
    finally:
        s.close()
def lookup(name):
    try:
        return socket.getaddrinfo(name, 80)
    except OSError as e:
        return f"{type(e).__name__}: {e}"
kept = 41
"""


@pytest.fixture(scope="module")
def server() -> Iterator[RecordingServer]:
    with recording_server("127.0.0.1") as s:
        yield s


@pytest.fixture(scope="module")
def rebind_target() -> Iterator[RecordingServer]:
    with recording_server("127.0.0.2") as s:
        yield s


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def net_manager() -> AsyncIterator[SandboxManager]:
    state_dir = Path(tempfile.mkdtemp(prefix="jsbx-", dir="/tmp"))
    config = manager_config(state_dir)
    config.NetworkSettings.allow_loopback_for_tests = True
    config.NetworkSettings.test_host_addresses = {
        "allowed.test": "127.0.0.1",
        "unlisted.test": "127.0.0.1",
        "allowed.test.evil.test": "127.0.0.1",
        "rebind.test": "127.0.0.2",
    }
    manager = SandboxManager.from_config(config)
    try:
        yield manager
    finally:
        for info in await manager.list_sandboxes(OWNER):
            await manager.remove(OWNER, info.sandbox_id)  # stops host proxies too
        await remove_everything_under(manager, state_dir)
        await manager.close()
        shutil.rmtree(state_dir, ignore_errors=True)


@pytest_asyncio.fixture(
    scope="module",
    loop_scope="module",
    params=[
        pytest.param("runc", marks=pytest.mark.runc),
        pytest.param("runsc", marks=pytest.mark.runsc),
    ],
)
async def box(
    net_manager: SandboxManager, request: pytest.FixtureRequest
) -> AsyncIterator[Sandbox]:
    sandbox = await net_manager.create(
        OWNER, runtime=request.param, purpose=purpose_label(f"{__name__}[{request.param}]")
    )
    output, reply = await execute(sandbox.connection_info, HELPERS)
    assert reply["status"] == "ok", output
    try:
        yield sandbox
    finally:
        await net_manager.remove(OWNER, sandbox.sandbox_id)


async def run(box: Sandbox, expression: str) -> Any:
    output, reply = await execute(box.connection_info, f"print(json.dumps({expression}))")
    assert reply["status"] == "ok", output
    return json.loads(output.strip().splitlines()[-1])


async def set_policy(manager: SandboxManager, box: Sandbox, policy: Any) -> None:
    await manager.set_network_policy(OWNER, box.sandbox_id, policy)


async def test_none_http_raw_tcp_udp_dns_all_fail(
    net_manager: SandboxManager, box: Sandbox, server: RecordingServer
) -> None:
    """Row 14: in none mode curl-like HTTP, TCP to an IP, UDP and DNS all fail; only lo."""
    await set_policy(net_manager, box, "none")
    before = server.connections
    status, said = await run(box, f"fetch('http://allowed.test:{server.port}/')")
    assert status in (-1, 403), said  # nothing listens, or the forwarder says "none"
    assert "Connection refused" in said or "network policy is none" in said
    tcp = await run(box, "raw(socket.AF_INET, socket.SOCK_STREAM, ('192.0.2.1', 80))")
    udp = await run(box, "raw(socket.AF_INET, socket.SOCK_DGRAM, ('192.0.2.1', 53))")
    assert tcp in NO_ROUTE
    assert udp in NO_ROUTE
    assert "gaierror" in await run(box, "lookup('pypi.org')")
    interfaces = await run(box, "[name for _, name in socket.if_nameindex()]")
    assert interfaces == ["lo"]
    assert server.connections == before


async def test_empty_allowlist_denies_like_none(
    net_manager: SandboxManager, box: Sandbox, server: RecordingServer
) -> None:
    """Row 15: an empty allowlist fails closed, with the proxy's 403."""
    await set_policy(net_manager, box, {"mode": "allowlist", "allow": []})
    before = server.connections
    assert await run(box, f"fetch('http://allowed.test:{server.port}/')") == [
        403,
        "not in allowlist",
    ]
    assert server.connections == before


async def test_allowlist_listed_name_works_others_get_403(
    net_manager: SandboxManager, box: Sandbox, server: RecordingServer
) -> None:
    """Row 16: listed name works (HTTP and CONNECT); unlisted, IP literal, another port and a
    look-alike get a 403 from the proxy, which never contacts them."""
    await set_policy(net_manager, box, f"allowed.test:{server.port}")
    port = server.port
    assert await run(box, f"fetch('http://allowed.test:{port}/')") == [
        200,
        "hello from the test server\n",
    ]
    assert (await run(box, f"connect_through('allowed.test', {port})"))[0] == 200
    before = server.connections
    refused = {
        f"http://unlisted.test:{port}/": "not in allowlist",
        f"http://allowed.test.evil.test:{port}/": "not in allowlist",
        f"http://allowed.test:{port + 1}/": "not in allowlist",
        "http://1.1.1.1/": "address literal (the allowlist names hosts)",
    }
    for url, rule in refused.items():
        assert await run(box, f"fetch({url!r})") == [403, rule], url
    assert (await run(box, "connect_through('1.1.1.1', 443)"))[0] == -1  # tunnel refused: 403
    assert server.connections == before


async def test_allowed_name_resolving_to_denied_address_is_refused_uncontacted(
    net_manager: SandboxManager, box: Sandbox, rebind_target: RecordingServer
) -> None:
    """Row 18 (DNS rebinding): an allowed name resolving to loopback is a 403, and the server
    at that address never sees a connection."""
    await set_policy(net_manager, box, "rebind.test")
    status, rule = await run(box, f"fetch('http://rebind.test:{rebind_target.port}/')")
    assert status == 403
    assert rule == "resolved to a denied address 127.0.0.2 (loopback)"
    assert rebind_target.connections == 0


async def test_raw_socket_ignoring_the_proxy_gets_no_route(
    net_manager: SandboxManager, box: Sandbox, server: RecordingServer
) -> None:
    """Row 17: with an allowlist in force, a socket that ignores the proxy reaches nothing: the
    allowed server's address is the sandbox's own loopback, anything else has no route."""
    await set_policy(net_manager, box, "allowed.test")
    before = server.connections
    own = await run(box, f"raw(socket.AF_INET, socket.SOCK_STREAM, ('127.0.0.1', {server.port}))")
    assert own == "ECONNREFUSED"
    away = await run(box, "raw(socket.AF_INET, socket.SOCK_STREAM, ('192.0.2.1', 443))")
    assert away in NO_ROUTE
    assert "gaierror" in await run(box, "lookup('allowed.test')")  # no resolver inside
    assert server.connections == before


async def test_open_still_refuses_metadata_and_private_addresses(
    net_manager: SandboxManager, box: Sandbox, server: RecordingServer
) -> None:
    """Row 19: open allows a public name, never metadata, private or link-local addresses."""
    await set_policy(net_manager, box, "open")
    assert (await run(box, f"fetch('http://allowed.test:{server.port}/')"))[0] == 200
    for target in (
        "169.254.169.254",
        "[fd00:ec2::254]",
        "[::ffff:169.254.169.254]",
        "100.100.100.200",
        "168.63.129.16",
        "10.0.0.1",
        "192.168.1.1",
    ):
        status, rule = await run(box, f"fetch('http://{target}/latest/meta-data/')")
        assert status == 403, target
        assert rule.startswith("resolved to a denied address"), (target, rule)


async def test_live_policy_change_applies_at_once_and_keeps_kernel_state(
    net_manager: SandboxManager, box: Sandbox, server: RecordingServer
) -> None:
    """Changing the policy of the running sandbox takes effect on the next request."""
    url = f"http://allowed.test:{server.port}/"
    await run(box, "globals().__setitem__('kept', kept + 1)")
    await set_policy(net_manager, box, "allowed.test")
    assert (await run(box, f"fetch({url!r})"))[0] == 200
    await set_policy(net_manager, box, "other.test")
    assert await run(box, f"fetch({url!r})") == [403, "not in allowlist"]
    await set_policy(net_manager, box, "none")
    assert (await run(box, f"fetch({url!r})"))[0] in (-1, 403)
    await set_policy(net_manager, box, "allowed.test")
    assert (await run(box, f"fetch({url!r})"))[0] == 200
    assert await run(box, "kept") >= 42  # the same interpreter throughout
    policy = await net_manager.network_policy(OWNER, box.sandbox_id)
    assert policy.as_dict() == {"mode": "allowlist", "allow": ["allowed.test"], "deny": []}


async def test_the_sandbox_cannot_reach_its_policy(
    net_manager: SandboxManager, box: Sandbox
) -> None:
    """Row 24: the policy and token live in the host-only state file, not in /run/sandbox."""
    await set_policy(net_manager, box, "allowed.test")
    seen = await run(box, "sorted(__import__('os').listdir('/run/sandbox'))")
    assert "state.json" not in seen
    assert "egress.sock" in seen
    assert await run(box, "'allowed.test' in open('/proc/self/environ').read()") is False


async def test_audit_records_every_decision(
    net_manager: SandboxManager, box: Sandbox, server: RecordingServer
) -> None:
    """Every decision (time, sandbox, host, port, allowed or the rule) is served back."""
    await set_policy(net_manager, box, "allowed.test")
    await run(box, f"fetch('http://allowed.test:{server.port}/')")
    await run(box, f"fetch('http://unlisted.test:{server.port}/')")
    entries = await net_manager.network_audit(OWNER, box.sandbox_id, limit=2)
    assert [(e["host"], e["allowed"], e["rule"]) for e in entries] == [
        ("allowed.test", True, "allow allowed.test"),
        ("unlisted.test", False, "not in allowlist"),
    ]
    assert {e["sandbox"] for e in entries} == {box.sandbox_id}
    assert all(e["port"] == server.port and e["time"] for e in entries)


async def test_a_killed_host_proxy_is_told_and_setting_the_policy_again_restarts_it(
    net_manager: SandboxManager, box: Sandbox, server: RecordingServer
) -> None:
    """The forwarder says the proxy is gone instead of hanging; a PUT of the policy recovers."""
    await set_policy(net_manager, box, "allowed.test")
    directory = SandboxDirectory(net_manager.settings.state_path, box.sandbox_id)
    pid = int(ProcessLock(directory.root / PROXY_LOCK).note_of_holder())
    os.kill(pid, signal.SIGKILL)
    url = f"http://allowed.test:{server.port}/"
    status, said = await run(box, f"fetch({url!r})")
    assert status == 403
    assert said == "network policy is none or its host proxy is not running"
    assert not proxy_running(directory)
    await set_policy(net_manager, box, "allowed.test")
    assert (await run(box, f"fetch({url!r})"))[0] == 200


async def test_the_policy_outlives_a_kernel_restart(
    net_manager: SandboxManager, box: Sandbox, server: RecordingServer
) -> None:
    """Restarting the interpreter (last in the module: the box's kernel changes) keeps the
    sandbox's forwarder and policy."""
    await set_policy(net_manager, box, "allowed.test")
    restarted = await net_manager.restart_kernel(OWNER, box.sandbox_id)
    output, reply = await execute(restarted.connection_info, HELPERS)
    assert reply["status"] == "ok", output
    assert await run(restarted, f"fetch('http://allowed.test:{server.port}/')") == [
        200,
        "hello from the test server\n",
    ]
