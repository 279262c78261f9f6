"""TLS inspection in the host proxy, driven in-process: the real EgressProxy on one end of a
socket pair (as a tunnel from the forwarder gives it a client), a TLS client trusting the
sandbox's CA on the other, and HTTPS test servers on 127.0.0.1 signed by a test CA.

The same through real sandboxes on both runtimes: tests/security/test_tls_inspection.py.
"""

from __future__ import annotations

import asyncio
import http.client
import os
import shutil
import socket
import ssl
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.network import NetworkPolicy, read_audit
from jupyter_sandbox.sandbox.network.addresses import AddressGuard, host_addresses
from jupyter_sandbox.sandbox.network.audit import AuditLog
from jupyter_sandbox.sandbox.network.credentials import CredentialStore
from jupyter_sandbox.sandbox.network.egress_proxy import EgressProxy
from jupyter_sandbox.sandbox.network.tls_ca import CA_CERT, TRUST_DIR, make_sandbox_ca
from tests.sandbox.network.tls_servers import LocalCA, TLSServer, local_ca, tls_server

OWNER = "alice"
SECRET = "Bearer s3cr3t-value-never-in-the-sandbox"


class InProcessProxy:
    """An EgressProxy on its own event loop thread; ``connect`` hands it a client."""

    def __init__(self, root: Path, credentials: CredentialStore, inspection: bool, ca: Path):
        self.root = root
        self.proxy = EgressProxy(
            root,
            AddressGuard(allow_loopback_for_tests=True, host_addresses=host_addresses()),
            AuditLog(root, root.name, 1024**2),
            test_host_addresses={
                "allowed.test": "127.0.0.1",
                "wrong.test": "127.0.0.1",
                "selfsigned.test": "127.0.0.1",
                "expired.test": "127.0.0.1",
            },
            credentials=lambda host, port: credentials.headers_for(OWNER, host, port),
            tls_inspection=inspection,
            upstream_extra_ca_file=str(ca),
        )
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def connect(self, target: str) -> socket.socket:
        """A client whose CONNECT to ``target`` was answered 200 (or the answer is left)."""
        ours, theirs = socket.socketpair()
        theirs.setblocking(False)

        async def serve() -> None:
            try:
                await self.proxy.handle(theirs, b"", lambda: None)
            finally:
                theirs.close()

        asyncio.run_coroutine_threadsafe(serve(), self.loop)
        ours.settimeout(30)
        ours.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        return ours

    def close(self) -> None:
        async def drain() -> None:  # the clients still served (a refused one's end)
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(drain(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def read_connect_answer(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(1)
        if not chunk:
            break
        data += chunk
    return data


@pytest.fixture(scope="module")
def ca() -> Iterator[LocalCA]:
    with local_ca() as made:
        yield made


@pytest.fixture(scope="module")
def upstream(ca: LocalCA) -> Iterator[TLSServer]:
    with tls_server(*ca.server_files("allowed.test")) as server:
        yield server


@contextmanager
def proxy_for(ca: LocalCA, *, inspection: bool = False) -> Iterator[InProcessProxy]:
    state_dir = Path(tempfile.mkdtemp(prefix="jsbi-", dir="/tmp"))
    directory = SandboxDirectory(state_dir, "0123456789ab")
    directory.create(os.getuid())
    make_sandbox_ca(directory.root, "0123456789ab")
    directory.write_state({"network": NetworkPolicy.parse("open").as_dict()})
    store = CredentialStore(state_dir / "credentials")
    made = InProcessProxy(directory.root, store, inspection, ca.pem_file)
    made.store = store  # type: ignore[attr-defined]
    try:
        yield made
    finally:
        made.close()
        shutil.rmtree(state_dir, ignore_errors=True)


def sandbox_context(root: Path) -> ssl.SSLContext:
    """What a sandbox trusts: its own CA (the bundle adds the host's)."""
    return ssl.create_default_context(cafile=str(root / TRUST_DIR / CA_CERT))


def https(proxy: InProcessProxy, host: str, port: int, method: str = "GET", **kw: object):
    """One request through the proxy as a sandbox's client makes it (http.client)."""
    sock = proxy.connect(f"{host}:{port}")
    answer = read_connect_answer(sock)
    assert answer.startswith(b"HTTP/1.1 200"), answer
    tls = sandbox_context(proxy.root).wrap_socket(sock, server_hostname=host)
    conn = http.client.HTTPConnection(host, port)
    conn.sock = tls
    headers = dict(kw.pop("headers", {}))  # type: ignore[call-overload]
    conn.request(method, "/x", headers=headers, **kw)  # type: ignore[arg-type]
    response = conn.getresponse()
    body = response.read()
    conn.close()
    return response, body


def test_a_credential_is_added_over_https_and_its_value_stays_out(
    ca: LocalCA, upstream: TLSServer
) -> None:
    with proxy_for(ca) as proxy:
        proxy.store.set(  # type: ignore[attr-defined]
            OWNER, "api", {"hosts": ["allowed.test"], "headers": {"Authorization": SECRET}}
        )
        response, body = https(
            proxy, "allowed.test", upstream.port, headers={"Authorization": "mine"}
        )
        assert response.status == 200
        assert body == b"hello from the TLS test server\n"
        assert response.getheader("Connection") == "close"
        seen = upstream.requests[-1]
        assert seen["authorization"] == SECRET  # replaced, never doubled
        assert seen["host"] == f"allowed.test:{upstream.port}"
        assert SECRET.encode() not in body
        assert SECRET not in str(response.getheaders())
        entries = read_audit(proxy.root)
        assert entries[-1]["rule"] == "inspected; added Authorization"
        assert entries[-1]["credential"] == "api"
        assert entries[-1]["method"] == "GET"
        assert SECRET not in (proxy.root / "network-audit.jsonl").read_text()


def test_bodies_stream_both_ways(ca: LocalCA, upstream: TLSServer) -> None:
    import hashlib

    with proxy_for(ca, inspection=True) as proxy:
        data = os.urandom(3 * 1024 * 1024 + 7)
        _response, body = https(proxy, "allowed.test", upstream.port, "POST", body=data)
        assert body.decode() == f"{len(data)} {hashlib.sha256(data).hexdigest()}\n"

        def chunks() -> Iterator[bytes]:
            for start in range(0, len(data), 100_000):
                yield data[start : start + 100_000]

        _response, body = https(
            proxy,
            "allowed.test",
            upstream.port,
            "POST",
            body=chunks(),
            encode_chunked=True,
            headers={"Transfer-Encoding": "chunked"},
        )
        assert body.decode() == f"{len(data)} {hashlib.sha256(data).hexdigest()}\n"


def test_without_credential_or_inspection_the_tunnel_is_untouched(
    ca: LocalCA, upstream: TLSServer
) -> None:
    """The sandbox then talks TLS with the server itself: its test CA certificate arrives,
    not one of the sandbox's CA."""
    with proxy_for(ca) as proxy:
        sock = proxy.connect(f"allowed.test:{upstream.port}")
        assert read_connect_answer(sock).startswith(b"HTTP/1.1 200")
        context = ssl.create_default_context(cafile=str(ca.pem_file))
        with context.wrap_socket(sock, server_hostname="allowed.test") as tls:
            issuer = dict(x[0] for x in tls.getpeercert()["issuer"])  # type: ignore[index]
            assert issuer["commonName"] == "jupyter-sandbox test CA"
        assert read_audit(proxy.root)[-1]["rule"] == "open"


@pytest.mark.parametrize(
    ("name", "kind", "reason"),
    [
        ("selfsigned.test", "self_signed", "self-signed certificate"),
        ("wrong.test", "wrong_name", "Hostname mismatch"),
        ("expired.test", "expired", "certificate has expired"),
    ],
)
def test_an_upstream_certificate_that_does_not_verify_is_refused_and_audited(
    ca: LocalCA, name: str, kind: str, reason: str
) -> None:
    files = {
        "self_signed": lambda: ca.server_files(name, self_signed=True),
        "wrong_name": lambda: ca.server_files("allowed.test"),
        "expired": lambda: ca.server_files(name, expired=True),
    }[kind]()
    with tls_server(*files) as server, proxy_for(ca, inspection=True) as proxy:
        response, body = https(proxy, name, server.port)
        assert response.status == 502
        assert reason in body.decode()
        assert server.requests == []  # no request reached it
        entry = read_audit(proxy.root)[-1]
        assert entry["allowed"] is False
        assert entry["rule"].startswith(f"the upstream certificate of {name} did not verify")
        assert reason in entry["rule"]


def test_a_host_header_other_than_the_connect_host_is_refused(
    ca: LocalCA, upstream: TLSServer
) -> None:
    with proxy_for(ca, inspection=True) as proxy:
        response, body = https(proxy, "allowed.test", upstream.port, headers={"Host": "evil.test"})
        assert response.status == 421
        rule = f"Host evil.test is not the CONNECT host allowed.test:{upstream.port}"
        assert body.decode() == f"refused: {rule}\n"
        assert response.getheader("X-Jupyter-Sandbox-Denied") == rule
        assert read_audit(proxy.root)[-1] == {**read_audit(proxy.root)[-1], "allowed": False}
        assert read_audit(proxy.root)[-1]["rule"] == rule


def test_a_server_name_other_than_the_connect_host_is_refused(
    ca: LocalCA, upstream: TLSServer
) -> None:
    with proxy_for(ca, inspection=True) as proxy:
        sock = proxy.connect(f"allowed.test:{upstream.port}")
        assert read_connect_answer(sock).startswith(b"HTTP/1.1 200")
        context = sandbox_context(proxy.root)
        context.check_hostname = False  # the leaf is for allowed.test: a client that looks away
        with context.wrap_socket(sock, server_hostname="evil.test") as tls:
            tls.sendall(b"GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n")
            answer = b""
            while chunk := tls.recv(65536):
                answer += chunk
        rule = "TLS server name evil.test is not the CONNECT host allowed.test"
        assert answer.startswith(b"HTTP/1.1 421 Misdirected Request\r\n")
        assert answer.endswith(f"refused: {rule}\n".encode())
        assert read_audit(proxy.root)[-1]["rule"] == rule
        assert upstream.requests == [] or upstream.requests[-1].get("host") != "evil.test"
