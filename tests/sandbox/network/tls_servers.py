"""HTTPS test servers on the host's loopback, signed by a test CA (or not), for TLS inspection.

``LocalCA`` makes a CA and server certificates for names; ``tls_server`` serves HTTPS on
127.0.0.1 with one of them, recording each request's headers. GET answers a short greeting (or
``size`` bytes), ``/redirect?to=URL`` a 302 to URL; POST answers how many body bytes arrived and their digest; a path under
``/simple/`` serves a PEP 503 index of ``files`` (for pip), behind basic auth when ``basic``.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import http.server
import ssl
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.sandbox.network.servers import serving


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


@dataclass
class LocalCA:
    """A CA of the tests (never of a sandbox): its PEM in ``directory/test-ca.pem``."""

    directory: Path
    key: ec.EllipticCurvePrivateKey = field(init=False)
    cert: x509.Certificate = field(init=False)

    def __post_init__(self) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name("jupyter-sandbox test CA"))
            .issuer_name(_name("jupyter-sandbox test CA"))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.pem_file.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    @property
    def pem_file(self) -> Path:
        return self.directory / "test-ca.pem"

    def server_files(
        self, name: str, *, self_signed: bool = False, expired: bool = False
    ) -> tuple[Path, Path]:
        """A certificate for ``name`` (signed by this CA, or by itself) and its key, as files."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        start, end = (now - datetime.timedelta(days=2), now - datetime.timedelta(days=1))
        if not expired:
            start, end = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=1)
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name) if self_signed else self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .sign(key if self_signed else self.key, hashes.SHA256())
        )
        stem = f"{name}{'-self' if self_signed else ''}{'-expired' if expired else ''}"
        cert_file = self.directory / f"{stem}.pem"
        key_file = self.directory / f"{stem}.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return cert_file, key_file


class TLSServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, context: ssl.SSLContext, size: int, files: dict[str, bytes]) -> None:
        self.context = context
        self.size = size
        self.files = files
        self.basic: str | None = None
        self.requests: list[dict[str, str]] = []  # each request's headers, lower-case names
        self.paths: list[str] = []
        super().__init__(("127.0.0.1", 0), _Handler)

    def get_request(self) -> tuple[Any, Any]:
        sock, address = super().get_request()
        # The handshake on the request's thread: a refused one must not stall the accepts.
        return self.context.wrap_socket(
            sock, server_side=True, do_handshake_on_connect=False
        ), address

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class _Handler(http.server.BaseHTTPRequestHandler):
    server: TLSServer
    protocol_version = "HTTP/1.1"

    def _record(self) -> bool:
        self.server.requests.append({k.lower(): v for k, v in self.headers.items()})
        self.server.paths.append(self.path)
        if self.server.basic is not None and self.headers.get("Authorization") != (
            "Basic " + base64.b64encode(self.server.basic.encode()).decode()
        ):
            self._send(401, b"authorization required\n", {"WWW-Authenticate": 'Basic realm="t"'})
            return False
        return True

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if not self._record():
            return
        if self.path.startswith("/redirect?to="):
            self._send(302, b"elsewhere\n", {"Location": self.path[len("/redirect?to=") :]})
            return
        if self.path.startswith("/simple/") or self.path.startswith("/files/"):
            self._index()
            return
        if not self.server.size:
            self._send(200, b"hello from the TLS test server\n")
            return
        self.send_response(200)
        self.send_header("Content-Length", str(self.server.size))
        self.end_headers()
        chunk = b"x" * (1024 * 1024)
        sent = 0
        while sent < self.server.size:
            piece = chunk[: min(len(chunk), self.server.size - sent)]
            self.wfile.write(piece)
            sent += len(piece)

    def _index(self) -> None:
        files = self.server.files
        if self.path.startswith("/files/"):
            name = self.path[len("/files/") :]
            if name in files:
                self._send(200, files[name], {"Content-Type": "application/octet-stream"})
            else:
                self._send(404, b"no such file\n")
            return
        project = self.path[len("/simple/") :].strip("/")
        links = "".join(
            f'<a href="/files/{name}#sha256={hashlib.sha256(data).hexdigest()}">{name}</a>\n'
            for name, data in files.items()
            if not project or name.split("-")[0].replace("_", "-") == project
        )
        self._send(
            200, f"<html><body>\n{links}</body></html>\n".encode(), {"Content-Type": "text/html"}
        )

    def do_POST(self) -> None:
        if not self._record():
            return
        digest = hashlib.sha256()
        count = 0
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b""):
                        pass
                    break
                data = self.rfile.read(size)
                self.rfile.readline()
                digest.update(data)
                count += len(data)
        else:
            left = int(self.headers.get("Content-Length", "0"))
            while left:
                data = self.rfile.read(min(left, 65536))
                digest.update(data)
                count += len(data)
                left -= len(data)
        self._send(200, f"{count} {digest.hexdigest()}\n".encode())

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def tls_server(
    cert_file: Path, key_file: Path, size: int = 0, files: dict[str, bytes] | None = None
) -> Iterator[TLSServer]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    with serving(TLSServer(context, size, files or {})) as server:
        yield server


@contextmanager
def local_ca() -> Iterator[LocalCA]:
    with tempfile.TemporaryDirectory(prefix="jsb-test-ca-") as directory:
        yield LocalCA(Path(directory))
