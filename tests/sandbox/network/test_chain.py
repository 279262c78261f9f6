"""The forwarder and the host proxy process, joined as in a sandbox but both on the host.

No container: the forwarder's own code runs as a host process on a free port with its socket
in a temporary sandbox directory, so the proxy's decisions, its token check and its lifetime can
be tested quickly and exactly. tests/security/test_network_egress.py runs the same chain through
real sandboxes on both runtimes.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import pytest

from jupyter_sandbox.sandbox.host.process_lock import ProcessLock
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.network import NetworkPolicy, NetworkSettings, read_audit
from jupyter_sandbox.sandbox.network.control import (
    PROXY_LOCK,
    TUNNEL_SOCKET,
    forwarder_environment,
    forwarder_source,
    proxy_running,
    start_proxy,
    stop_proxy,
)
from jupyter_sandbox.sandbox.network.credentials import CredentialStore
from jupyter_sandbox.sandbox.network.tunnels import TunnelRefused, open_tunnel
from tests.sandbox.network.servers import RecordingServer, recording_server
from tests.sandbox.network.test_sni import client_hello
from tests.shadowing import imported, plant, working_directory

TOKEN = "test-token-0123456789"
OWNER = "alice"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Chain:
    def __init__(self, directory: SandboxDirectory, port: int, credentials: Path) -> None:
        self.directory = directory
        self.port = port
        # The owner's credentials the proxy reads (NetworkSettings.credentials_dir).
        self.credentials = CredentialStore(credentials)

    def set_policy(self, policy: str | dict[str, object]) -> None:
        self.directory.update_state(network=NetworkPolicy.parse(policy).as_dict())

    def request(self, head: str, then: bytes = b"") -> bytes:
        """Send a raw request head (and ``then``, once answered) to the forwarder; everything
        it answered."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as sock:
            sock.sendall(head.encode("latin-1"))
            data = b""
            if then:  # as a client does: wait for the CONNECT's answer first
                while b"\r\n\r\n" not in data:
                    data += sock.recv(65536)
                sock.sendall(then)
            while chunk := sock.recv(65536):
                data += chunk
            return data

    def get(self, url: str, host_header: str = "") -> bytes:
        extra = f"Host: {host_header}\r\n" if host_header else ""
        return self.request(f"GET {url} HTTP/1.1\r\n{extra}Connection: close\r\n\r\n")


@pytest.fixture
def server() -> Iterator[RecordingServer]:
    with recording_server("127.0.0.1") as s:
        yield s


@pytest.fixture
def other_loopback_server() -> Iterator[RecordingServer]:
    """A server on 127.0.0.2: loopback that allow_loopback_for_tests does not open."""
    with recording_server("127.0.0.2") as s:
        yield s


@contextmanager
def make_chain(**options: float) -> Iterator[Chain]:
    """A chain; ``options``: more NetworkSettings (ask_timeout, max_pending_requests)."""
    state_dir = Path(tempfile.mkdtemp(prefix="jsbn-", dir="/tmp"))
    (state_dir / "server-cwd").mkdir()
    directory = SandboxDirectory(state_dir, "0123456789ab")
    directory.create(os.getuid())
    directory.write_state(
        {"network": NetworkPolicy("none").as_dict(), "network_token": TOKEN, "owner": OWNER}
    )
    port = free_port()
    forwarder = subprocess.Popen(
        [sys.executable, "-c", forwarder_source()],
        env={**os.environ, **forwarder_environment(TOKEN, port, str(directory.io / TUNNEL_SOCKET))},
    )
    deadline = time.monotonic() + 30
    while not (directory.io / TUNNEL_SOCKET).exists():
        assert time.monotonic() < deadline, "the forwarder did not listen"
        assert forwarder.poll() is None, "the forwarder exited"
        time.sleep(0.01)
    settings = NetworkSettings(
        allow_loopback_for_tests=True,
        credentials_dir=str(state_dir / "credentials"),
        test_host_addresses={
            "allowed.test": "127.0.0.1",
            "rebind.test": "127.0.0.2",
            "metadata.test": "169.254.169.254",
            "mapped.test": "::ffff:169.254.169.254",
        },
        **options,
    )
    # Started from a directory holding modules a user could leave in a server's working
    # directory (the proxy is a host process: it must import none of them).
    server_dir = plant(state_dir / "server-cwd")
    try:
        with working_directory(server_dir):
            asyncio.run(start_proxy(directory, settings.proxy_options()))
        assert imported(server_dir) is None
        yield Chain(directory, port, state_dir / "credentials")
    finally:
        stop_proxy(directory)
        forwarder.kill()
        forwarder.wait()
        shutil.rmtree(state_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def chain() -> Iterator[Chain]:
    """Shared by the module: each test sets the policy it needs first."""
    with make_chain() as made:
        yield made


@pytest.fixture
def own_chain() -> Iterator[Chain]:
    with make_chain() as made:
        yield made


def status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def test_allowlisted_name_is_fetched_and_audited(chain: Chain, server: RecordingServer) -> None:
    chain.set_policy("allowed.test")
    answer = chain.get(f"http://allowed.test:{server.port}/x")
    assert status(answer) == 200
    assert answer.endswith(b"hello from the test server\n")
    entry = read_audit(chain.directory.root)[-1]
    assert entry["host"] == "allowed.test"
    assert entry["port"] == server.port
    assert entry["allowed"] is True
    assert entry["rule"] == "allow allowed.test"
    assert entry["address"] == "127.0.0.1"
    assert entry["sandbox"] == "0123456789ab"


def test_connect_tunnel_carries_bytes(chain: Chain, server: RecordingServer) -> None:
    chain.set_policy("allowed.test")
    answer = chain.request(
        f"CONNECT allowed.test:{server.port} HTTP/1.1\r\nHost: allowed.test\r\n\r\n"
        "GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n"
    )
    assert answer.startswith(b"HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.0 200")
    assert read_audit(chain.directory.root)[-1]["method"] == "CONNECT"


@pytest.mark.checklist(
    row=22,
    attack="CONNECT to an allowed name, then a TLS ClientHello for another name (also sent "
    "early, with the CONNECT head)",
    expected="closed before any byte of it passes; the same name passes",
)
def test_connect_with_another_tls_server_name_is_closed_before_any_byte_passes(
    chain: Chain, server: RecordingServer, observe: Callable[..., None]
) -> None:
    """Row 22: CONNECT to an allowed name, then TLS asking for another name: closed."""
    chain.set_policy("allowed.test")
    connect = f"CONNECT allowed.test:{server.port} HTTP/1.1\r\n\r\n"
    answer = chain.request(connect, then=client_hello("evil.test"))
    assert answer == b"HTTP/1.1 200 Connection established\r\n\r\n"  # then closed
    entry = read_audit(chain.directory.root)[-1]
    assert entry["allowed"] is False
    assert entry["rule"] == "TLS server name evil.test is not the CONNECT host allowed.test"
    # The same name passes: the (plain HTTP) test server answers the TLS bytes itself.
    answer = chain.request(connect, then=client_hello("allowed.test"))
    established = b"HTTP/1.1 200 Connection established\r\n\r\n"
    assert answer.startswith(established)
    assert b"Error code explanation: 400" in answer
    # Early bytes sent with the CONNECT head are checked too.
    answer = chain.request(connect + client_hello("evil.test").decode("latin-1"))
    assert answer == b"HTTP/1.1 200 Connection established\r\n\r\n"
    # A ClientHello split over two records (which TLS servers reassemble) has no name the
    # proxy can read in its first record: closed too, not passed unchecked.
    answer = chain.request(connect, then=split_in_two_records(client_hello("evil.test")))
    assert answer == b"HTTP/1.1 200 Connection established\r\n\r\n"
    entry = read_audit(chain.directory.root)[-1]
    assert entry["allowed"] is False
    assert entry["rule"].startswith("a TLS ClientHello whose server name cannot be read")
    observe(
        "another server name, in one record or split over two: closed after the 200, "
        "audited; the same name: passed",
        4,
    )


def split_in_two_records(record: bytes) -> bytes:
    """``record`` (one TLS handshake record) as two records, its first 10 bytes of payload in
    the first: what a client that fragments its ClientHello sends."""
    kind, version, payload = record[:1], record[1:3], record[5:]
    first, rest = payload[:10], payload[10:]
    return (
        kind + version + len(first).to_bytes(2, "big") + first
        + kind + version + len(rest).to_bytes(2, "big") + rest
    )  # fmt: skip


@pytest.mark.parametrize(
    ("target", "rule"),
    [
        ("unlisted.test", "not in allowlist"),
        ("allowed.test.evil.test", "not in allowlist"),
        ("1.1.1.1", "address literal"),
    ],
)
def test_allowlist_refusals_are_403_from_the_proxy(
    chain: Chain, server: RecordingServer, target: str, rule: str
) -> None:
    chain.set_policy("allowed.test")
    answer = chain.get(f"http://{target}:{server.port}/")
    assert status(answer) == 403
    assert rule.encode() in answer
    assert b"X-Jupyter-Sandbox-Denied" in answer
    assert server.connections == 0
    entry = read_audit(chain.directory.root)[-1]
    assert entry["allowed"] is False
    assert rule in entry["rule"]
    assert entry["host"] == target


def test_other_port_of_an_allowed_name_is_refused(chain: Chain, server: RecordingServer) -> None:
    chain.set_policy(f"allowed.test:{server.port}")
    assert status(chain.get(f"http://allowed.test:{server.port}/")) == 200
    answer = chain.request(f"CONNECT allowed.test:{server.port + 1} HTTP/1.1\r\n\r\n")
    assert status(answer) == 403
    assert b"not in allowlist" in answer


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("rebind.test", "loopback"),
        ("metadata.test", "metadata"),
        ("mapped.test", "metadata"),
    ],
)
def test_allowed_name_resolving_to_a_denied_address_is_never_contacted(
    chain: Chain, other_loopback_server: RecordingServer, name: str, why: str
) -> None:
    chain.set_policy(name)
    answer = chain.get(f"http://{name}:{other_loopback_server.port}/")
    assert status(answer) == 403
    assert b"resolved to a denied address" in answer
    assert why.encode() in answer
    assert other_loopback_server.connections == 0


def test_open_still_refuses_metadata_private_and_loopback(
    chain: Chain, server: RecordingServer, other_loopback_server: RecordingServer
) -> None:
    chain.set_policy("open")
    assert status(chain.get(f"http://allowed.test:{server.port}/")) == 200
    for target in (
        "169.254.169.254",
        "[fd00:ec2::254]",
        "10.0.0.1",
        "127.0.0.2",
        "[::ffff:169.254.169.254]",
        "100.100.100.200",
        "168.63.129.16",
    ):
        answer = chain.get(f"http://{target}:{other_loopback_server.port}/")
        assert status(answer) == 403, target
        assert b"resolved to a denied address" in answer, target
    assert other_loopback_server.connections == 0


def test_live_policy_change_applies_to_the_next_request(
    chain: Chain, server: RecordingServer
) -> None:
    url = f"http://allowed.test:{server.port}/"
    chain.set_policy("allowed.test")
    assert status(chain.get(url)) == 200
    chain.set_policy({"mode": "allowlist", "allow": []})
    assert status(chain.get(url)) == 403
    chain.set_policy("open")
    assert status(chain.get(url)) == 200
    chain.set_policy("none")
    answer = chain.get(url)
    assert status(answer) == 403
    assert b"network policy is none" in answer


def test_smuggled_host_header_is_replaced(chain: Chain, server: RecordingServer) -> None:
    chain.set_policy("allowed.test")
    chain.get(f"http://allowed.test:{server.port}/", host_header="metadata.google.internal")
    assert server.hosts == [f"allowed.test:{server.port}"]


def test_malformed_requests_get_400(chain: Chain) -> None:
    chain.set_policy("open")
    assert status(chain.request("GET /relative HTTP/1.1\r\n\r\n")) == 400
    assert status(chain.request("CONNECT nohost HTTP/1.1\r\n\r\n")) == 400
    assert status(chain.request("GET http://bad_host!/ HTTP/1.1\r\n\r\n")) == 400


@pytest.mark.checklist(
    row=23,
    attack="another local process poses as the sandbox's forwarder (the tunnel socket swapped "
    "for another service, or a link to one)",
    expected="without the per-sandbox token the proxy sends it nothing and closes",
)
async def test_a_peer_without_the_token_is_refused_and_sent_nothing(
    tmp_path: Path, observe: Callable[..., None]
) -> None:
    """Were the sandbox to swap its socket for another service, the proxy would not talk."""
    path = tmp_path / TUNNEL_SOCKET
    async with tunnel_to_peer(path, b"JSB-EGRESS 1 wrong-token\n") as (opening, impostor):
        with pytest.raises(TunnelRefused, match="token"):
            await opening
        impostor.settimeout(30)
        assert impostor.recv(100) == b""  # closed, and nothing was sent
    link = tmp_path / "link.sock"
    link.symlink_to(path)
    with pytest.raises(TunnelRefused, match="not a socket"):
        await open_tunnel(link, TOKEN)
    observe("a wrong token: refused, nothing sent; a link in place of the socket: refused", 2)


async def test_a_tunnel_has_room_for_more_than_the_default_send_buffer(tmp_path: Path) -> None:
    """The host's end of a tunnel asks for TUNNEL_SEND_BUFFER (under gVisor, downloads run
    faster so: benchmarks/network.py); what was sent after the hello comes back with it."""
    hello = f"JSB-EGRESS 1 {TOKEN}\nGET / HTTP/1.1\r\n".encode()
    async with tunnel_to_peer(tmp_path / TUNNEL_SOCKET, hello) as (opening, _):
        tunnel, received = await opening
        with tunnel, socket.socket(socket.AF_UNIX) as plain:
            assert received == b"GET / HTTP/1.1\r\n"
            default = plain.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
            assert tunnel.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) > default


@asynccontextmanager
async def tunnel_to_peer(
    path: Path, hello: bytes
) -> AsyncIterator[tuple[asyncio.Future[tuple[socket.socket, bytes]], socket.socket]]:
    """``open_tunnel(path)`` started against a peer listening at ``path``, which has accepted it
    and sent ``hello``: the opening (to await) and the peer's end."""
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(path))
        listener.listen(1)
        listener.settimeout(30)
        opening = asyncio.ensure_future(open_tunnel(path, TOKEN))
        peer, _ = await asyncio.get_running_loop().run_in_executor(None, listener.accept)
        with peer:
            peer.sendall(hello)
            yield opening, peer


def listening_sockets(pid: int) -> list[str]:
    """The listening sockets among ``pid``'s open files (from /proc)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:  # closed meanwhile (listdir's own descriptor)
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                found.append(f"{table} {fields[1]}")
    for line in Path(f"/proc/{pid}/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[3], 16) & 0x10000 and fields[6] in inodes:  # __SO_ACCEPTCON
            found.append(f"unix {fields[-1] if len(fields) > 7 else ''}")
    return found


@pytest.mark.checklist(
    row=23,
    attack="another local process using a sandbox's host proxy",
    expected="impossible: the proxy listens on no socket (it dials into the sandbox's own "
    "directory), so there is nothing to connect to",
)
def test_the_host_proxy_listens_nowhere_so_no_local_process_can_use_it(
    chain: Chain, observe: Callable[..., None]
) -> None:
    pid = int(ProcessLock(chain.directory.root / PROXY_LOCK).note_of_holder())
    assert listening_sockets(pid) == []
    before = len(listening_sockets(os.getpid()))  # the check does see a listener:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert len(listening_sockets(os.getpid())) == before + 1
    observe("no listening TCP or Unix socket among the proxy process's descriptors")


def test_proxy_exits_once_the_sandbox_directory_is_gone(own_chain: Chain) -> None:
    assert proxy_running(own_chain.directory)
    pid = int(ProcessLock(own_chain.directory.root / PROXY_LOCK).note_of_holder())
    shutil.rmtree(own_chain.directory.root)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        if Path(f"/proc/{pid}/status").read_text().find("State:\tZ") >= 0:
            return  # exited; our child until reaped
        time.sleep(0.05)
    raise AssertionError(f"host proxy {pid} still runs after its sandbox directory went")


def test_audit_is_bounded(tmp_path: Path) -> None:
    from jupyter_sandbox.sandbox.network.audit import AuditLog

    log = AuditLog(tmp_path, "0123456789ab", max_bytes=2000)
    for i in range(100):
        log.record(host=f"h{i}.test", port=443, method="CONNECT", allowed=False, rule="x")
    total = sum(p.stat().st_size for p in tmp_path.iterdir())
    assert total <= 4000
    entries = read_audit(tmp_path, limit=5)
    assert [e["host"] for e in entries] == [f"h{i}.test" for i in range(95, 100)]
    assert (
        json.loads((tmp_path / "network-audit.jsonl").read_text().splitlines()[-1])["port"] == 443
    )


def test_credentials_go_to_the_named_host_only_never_to_an_address(
    chain: Chain, server: RecordingServer
) -> None:
    """Under open, where an IP literal passes the policy, a credential for allowed.test goes
    with a request whose URI names allowed.test, never with one naming its address, nor
    through a tunnel to the address (a CONNECT to a credential's host is inspected:
    tests/security/test_tls_inspection.py); it is read on each request."""
    chain.set_policy("open")
    value = "Bearer chain-secret-6e1f"
    chain.credentials.set(
        OWNER, "api", {"hosts": ["allowed.test"], "headers": {"Authorization": value}}
    )
    # A pattern whose labels are digits matches an address's text: the proxy still never
    # adds a credential to a request for an address (no rule names one).
    chain.credentials.set(OWNER, "digits", {"hosts": ["*.0.0.1"], "headers": {"X-Key": value}})
    try:
        before = len(server.authorizations)
        named = chain.get(f"http://allowed.test:{server.port}/", host_header="evil.test")
        by_address = chain.get(f"http://127.0.0.1:{server.port}/")
        forged = chain.request(
            f"GET http://allowed.test:{server.port}/ HTTP/1.1\r\n"
            "Authorization: Bearer mine\r\nConnection: close\r\n\r\n"
        )
        tunnel = chain.request(
            f"CONNECT 127.0.0.1:{server.port} HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n",
        )
        for answer in (named, by_address, forged, tunnel):
            assert answer.startswith((b"HTTP/1.0 200 ", b"HTTP/1.1 200 ")), answer
            assert value.encode() not in answer
        assert server.authorizations[before:] == [[value], [], [value], []]
        chain.credentials.remove(OWNER, "api")
        chain.credentials.remove(OWNER, "digits")
        chain.get(f"http://allowed.test:{server.port}/")
        assert server.authorizations[-1] == []  # removed: the next request goes without
        audit = read_audit(chain.directory.root)
        assert [entry.get("credential") for entry in audit[-5:]] == ["api", None, "api", None, None]
        assert value not in json.dumps(audit)
    finally:
        for left in chain.credentials.describe(OWNER):
            chain.credentials.remove(OWNER, left["name"])
